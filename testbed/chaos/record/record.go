package record

import (
	"errors"
	"fmt"
	"math"
)

// EnvDir names the directory a worker appends its record file to. Unset,
// workers record nothing.
const EnvDir = "POLLUX_TESTBED_RECORD"

// TempSuffix marks a record file whose start record was not complete
// when its worker died: readers skip it.
const TempSuffix = ".tmp"

// MaxLine is the longest encoded record, newline included.
const MaxLine = 4096

// Sentinel errors; every error of this package wraps one of them.
var (
	// ErrMalformed is a record or file that is not a valid worker record:
	// bad JSON, an unknown field or kind, a value out of range, a record
	// out of place (no start first, something after the exit, another
	// worker's identity), an over-long line.
	ErrMalformed = errors.New("record: malformed")
	// ErrIO is a record that could not be written or a file that could
	// not be read.
	ErrIO = errors.New("record: i/o")
)

// Kind is what a record says happened.
type Kind string

// The kinds, in the order a worker writes them.
const (
	Start      Kind = "start"
	Restore    Kind = "restore"
	Checkpoint Kind = "checkpoint"
	Done       Kind = "done"
	Exit       Kind = "exit"
)

// Record is one line of a worker's file.
type Record struct {
	// T is CLOCK_MONOTONIC in nanoseconds: read before the process did
	// anything for a start, after the fact otherwise.
	T int64 `json:"t"`
	// T0 is read before a restore began reading or a checkpoint began
	// writing.
	T0   int64 `json:"t0,omitempty"`
	Kind Kind  `json:"kind"`
	// Job, Inc (its incarnation), Rank and PID identify the worker; every
	// record of a file carries the same.
	Job  string `json:"job"`
	Inc  uint64 `json:"inc"`
	Rank int    `json:"rank"`
	PID  int    `json:"pid"`
	// Boot (start) is the process's start time in clock ticks since boot,
	// which tells it from a later process reusing its pid; GPUs are the
	// devices it was given.
	Boot uint64 `json:"boot,omitempty"`
	GPUs []int  `json:"gpus,omitempty"`
	// From (restore) is the incarnation that wrote the checkpoint read;
	// Fresh says there was none.
	From  uint64 `json:"from,omitempty"`
	Fresh bool   `json:"fresh,omitempty"`
	// Epoch and Progress (restore, checkpoint, done) are the training
	// state read, written or reached; Finished (checkpoint) says the
	// state written is the end of training.
	Epoch    int     `json:"epoch,omitempty"`
	Progress float64 `json:"progress,omitempty"`
	Finished bool    `json:"finished,omitempty"`
	// Code (exit) is the exit status the worker is about to return.
	Code int `json:"code,omitempty"`
}

// MaxName bounds a job name.
const MaxName = 128

// MaxGPUs bounds the GPU list and the GPU indexes.
const MaxGPUs = 1024

// Validate reports whether r is a well-formed record of its kind.
func (r *Record) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s record: %s", ErrMalformed, r.Kind, fmt.Sprintf(format, a...))
	}
	switch r.Kind {
	case Start, Restore, Checkpoint, Done, Exit:
	default:
		return fmt.Errorf("%w: unknown kind %q", ErrMalformed, r.Kind)
	}
	if r.T <= 0 {
		return bad("time %d is not positive", r.T)
	}
	if err := checkName(r.Job); err != nil {
		return bad("job: %v", err)
	}
	if r.PID <= 0 || r.Rank < 0 || r.Rank >= MaxGPUs*1024 {
		return bad("pid %d, rank %d", r.PID, r.Rank)
	}
	timed := r.Kind == Restore || r.Kind == Checkpoint
	if timed != (r.T0 != 0) {
		return bad("t0 %d: restore and checkpoint records carry it, others not", r.T0)
	}
	if timed && (r.T0 < 0 || r.T0 > r.T) {
		return bad("t0 %d after t %d", r.T0, r.T)
	}
	if (r.Kind == Start) != (r.Boot != 0) || (r.Kind != Start && len(r.GPUs) != 0) {
		return bad("boot and gpus belong to start records (boot %d, %d gpus)", r.Boot, len(r.GPUs))
	}
	if len(r.GPUs) > MaxGPUs {
		return bad("%d gpus", len(r.GPUs))
	}
	for i, g := range r.GPUs {
		if g < 0 || g >= MaxGPUs {
			return bad("gpu %d out of [0, %d)", g, MaxGPUs)
		}
		for _, h := range r.GPUs[:i] {
			if g == h {
				return bad("gpu %d listed twice", g)
			}
		}
	}
	if r.Kind != Restore && (r.From != 0 || r.Fresh) {
		return bad("from and fresh belong to restore records")
	}
	if r.Kind == Restore && r.Fresh && (r.From != 0 || r.Epoch != 0 || r.Progress != 0) {
		return bad("a fresh start read no checkpoint (from %d, epoch %d, progress %v)", r.From, r.Epoch, r.Progress)
	}
	trains := r.Kind == Restore || r.Kind == Checkpoint || r.Kind == Done
	if !trains && (r.Epoch != 0 || r.Progress != 0) {
		return bad("epoch and progress belong to restore, checkpoint and done records")
	}
	if r.Epoch < 0 || !(r.Progress >= 0) || math.IsInf(r.Progress, 0) {
		return bad("epoch %d, progress %v", r.Epoch, r.Progress)
	}
	if r.Finished && r.Kind != Checkpoint {
		return bad("finished belongs to checkpoint records")
	}
	if r.Code != 0 && r.Kind != Exit {
		return bad("code belongs to exit records")
	}
	return nil
}

// checkName accepts 1 to MaxName bytes of printable ASCII without spaces.
func checkName(s string) error {
	if s == "" || len(s) > MaxName {
		return fmt.Errorf("length %d outside [1, %d]", len(s), MaxName)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%q has a byte outside printable ASCII", s)
		}
	}
	return nil
}
