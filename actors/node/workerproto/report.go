package workerproto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"pollux/actors/jobspec"
	"pollux/internal/jsonin"
)

// MaxLineBytes bounds one report line (newline excluded).
const MaxLineBytes = 4096

// Report is one progress report of one worker, sent as a single JSON line.
type Report struct {
	// Job and Incarnation name the job run the worker belongs to; the
	// receiver drops reports whose pair is not current.
	Job         string `json:"job"`
	Incarnation uint64 `json:"incarnation"`
	// Rank is the worker's rank in [0, world size).
	Rank int `json:"rank"`
	// StepTime is the mean wall time of one micro-step including any
	// synchronisation, in seconds (> 0).
	StepTime float64 `json:"step_time"`
	// SyncTime is the part of StepTime spent synchronising gradients, in
	// seconds (0 <= SyncTime <= StepTime).
	SyncTime float64 `json:"sync_time"`
	// GradSqr and GradVar are the gradient statistics measured at the
	// initial batch size: |G|^2 and tr(Sigma), both >= 0 (0 means not
	// measured yet).
	GradSqr float64 `json:"grad_sqr"`
	GradVar float64 `json:"grad_var"`
	// Epoch counts finished epochs (>= 0).
	Epoch int `json:"epoch"`
	// Progress is the cumulative training progress in steps at the
	// initial batch size, scaled by the gain (>= 0).
	Progress float64 `json:"progress"`
	// LocalBatch is the atomic per-GPU batch the worker ran (> 0).
	LocalBatch int `json:"local_bsz"`
	// AccumSteps is the number of accumulation micro-steps per
	// synchronisation the worker ran (>= 0).
	AccumSteps int `json:"accum_steps"`
	// Checkpoint, if set (not zero), is the latest checkpoint the worker
	// saved in this incarnation (rank 0 saves them).
	Checkpoint SavedCheckpoint `json:"checkpoint,omitzero"`
	// Done is set on the last report of a worker whose training finished.
	Done bool `json:"done,omitempty"`
	// Token is the worker's report token (POLLUX_REPORT_TOKEN): the
	// receiving agent refuses a report without the token of its rank and
	// incarnation (see ReportToken).
	Token string `json:"token,omitempty"`
}

// SavedCheckpoint is a checkpoint a worker saved.
type SavedCheckpoint struct {
	// Epoch and Progress are the finished epochs and the progress the
	// checkpoint holds (as Report's).
	Epoch    int     `json:"epoch"`
	Progress float64 `json:"progress"`
	// SavedAt is when it was saved: seconds since the Unix epoch (> 0).
	SavedAt float64 `json:"saved_at"`
}

// validate checks a saved checkpoint's fields.
func (c *SavedCheckpoint) validate() error {
	switch {
	case c.Epoch < 0:
		return fmt.Errorf("%w: checkpoint epoch %d is negative", ErrBadReport, c.Epoch)
	case !(c.Progress >= 0) || math.IsInf(c.Progress, 0):
		return fmt.Errorf("%w: checkpoint progress is %v, want a finite number >= 0", ErrBadReport, c.Progress)
	case !(c.SavedAt > 0) || math.IsInf(c.SavedAt, 0):
		return fmt.Errorf("%w: checkpoint saved_at is %v, want a finite number > 0", ErrBadReport, c.SavedAt)
	}
	return nil
}

// Validate reports whether every field of r is in its documented range.
func (r Report) Validate() error {
	if err := jobspec.CheckName(r.Job); err != nil {
		return fmt.Errorf("%w: job: %w", ErrBadReport, err)
	}
	if r.Rank < 0 {
		return fmt.Errorf("%w: rank %d is negative", ErrBadReport, r.Rank)
	}
	checks := []struct {
		name     string
		v        float64
		positive bool
	}{
		{"step_time", r.StepTime, true},
		{"sync_time", r.SyncTime, false},
		{"grad_sqr", r.GradSqr, false},
		{"grad_var", r.GradVar, false},
		{"progress", r.Progress, false},
	}
	for _, c := range checks {
		switch {
		case math.IsNaN(c.v) || math.IsInf(c.v, 0):
			return fmt.Errorf("%w: %s is %v, want a finite number", ErrBadReport, c.name, c.v)
		case c.positive && c.v <= 0:
			return fmt.Errorf("%w: %s is %v, want > 0", ErrBadReport, c.name, c.v)
		case c.v < 0:
			return fmt.Errorf("%w: %s is %v, want >= 0", ErrBadReport, c.name, c.v)
		}
	}
	switch {
	case r.SyncTime > r.StepTime:
		return fmt.Errorf("%w: sync_time %v exceeds step_time %v", ErrBadReport, r.SyncTime, r.StepTime)
	case r.Epoch < 0:
		return fmt.Errorf("%w: epoch %d is negative", ErrBadReport, r.Epoch)
	case r.LocalBatch <= 0:
		return fmt.Errorf("%w: local_bsz %d, want > 0", ErrBadReport, r.LocalBatch)
	case r.AccumSteps < 0:
		return fmt.Errorf("%w: accum_steps %d is negative", ErrBadReport, r.AccumSteps)
	case len(r.Token) > MaxTokenBytes:
		return fmt.Errorf("%w: token of %d bytes, at most %d", ErrBadReport, len(r.Token), MaxTokenBytes)
	}
	if r.Checkpoint != (SavedCheckpoint{}) {
		return r.Checkpoint.validate()
	}
	return nil
}

// Decode parses and validates one report line (a trailing newline is
// allowed). Unknown fields, trailing data and out-of-range values are
// errors wrapping ErrBadReport.
func Decode(line []byte) (Report, error) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) > MaxLineBytes {
		return Report{}, fmt.Errorf("%w: %d bytes", ErrLineTooLong, len(line))
	}
	var r Report
	if err := jsonin.Decode(line, &r); err != nil {
		return Report{}, fmt.Errorf("%w: %w", ErrBadReport, err)
	}
	if err := r.Validate(); err != nil {
		return Report{}, err
	}
	return r, nil
}

// Encode returns r as one JSON line, newline included. It validates r
// first so a worker never sends what the receiver would reject.
func Encode(r Report) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReport, err)
	}
	return append(b, '\n'), nil
}

// Reader reads report lines from a stream. A bad line is returned as an
// error from Next and the stream stays usable (the caller logs and drops
// it); only ErrLineTooLong and I/O errors end the stream.
type Reader struct {
	sc *bufio.Scanner
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), MaxLineBytes+2)
	return &Reader{sc: sc}
}

// Next returns the next report. It returns io.EOF at the end of the
// stream, an error wrapping ErrBadReport for a line to drop (call Next
// again), or an error wrapping ErrLineTooLong / the I/O error that ended
// the stream.
func (rd *Reader) Next() (Report, error) {
	for rd.sc.Scan() {
		line := rd.sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return Decode(line)
	}
	if err := rd.sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return Report{}, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, MaxLineBytes)
		}
		return Report{}, fmt.Errorf("workerproto: reading reports: %w", err)
	}
	return Report{}, io.EOF
}
