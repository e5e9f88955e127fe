package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ProgressFile is the summary the library writes beside every checkpoint,
// for tools without torch.
const ProgressFile = "pollux-progress.json"

// maxProgressSize bounds what ReadProgress reads (a summary with the
// longest run history the library keeps is about 200 KiB).
const maxProgressSize = 1 << 20

// ErrBadProgress is returned for a progress file that does not decode.
var ErrBadProgress = errors.New("worker: bad progress file")

// Progress is a job's pollux-progress.json: where its last checkpoint
// stands.
type Progress struct {
	Job         string  `json:"job"`
	Incarnation uint64  `json:"incarnation"`
	Epoch       int     `json:"epoch"`
	Position    int     `json:"position"`
	Progress    float64 `json:"progress"`
	// EpochFinished: the checkpoint was taken at an epoch's end.
	EpochFinished bool `json:"epoch_finished"`
	Done          bool `json:"done"`
	// Metrics are the script's job.metrics (the examples: accuracy and
	// target).
	Metrics map[string]float64 `json:"metrics"`
	GradSqr float64            `json:"grad_sqr"`
	GradVar float64            `json:"grad_var"`
	// Runs are the incarnations that trained, oldest first (the latest
	// 1,000), each with the batch configuration it ran.
	Runs []Run `json:"runs"`
	// SavedAt is the checkpoint's wall-clock time (Unix seconds).
	SavedAt float64 `json:"saved_at"`
}

// Run is one incarnation of a job as its rank 0 ran it.
type Run struct {
	Incarnation uint64 `json:"incarnation"`
	// Replicas is K, Nodes the machines they ran on.
	Replicas int `json:"replicas"`
	Nodes    int `json:"nodes"`
	// AtomicBatch is m, AccumSteps s, BatchSize M = K m (s + 1).
	AtomicBatch int `json:"atomic_bsz"`
	AccumSteps  int `json:"accum_steps"`
	BatchSize   int `json:"batch_size"`
	// Epoch and Progress are where it started.
	Epoch    int     `json:"epoch"`
	Progress float64 `json:"progress"`
}

// ReadProgress reads dir's progress file. A missing file is an error
// satisfying errors.Is(err, fs.ErrNotExist) (no checkpoint yet); one that
// does not decode wraps ErrBadProgress and names the file.
func ReadProgress(dir string) (Progress, error) {
	path := filepath.Join(dir, ProgressFile)
	f, err := os.Open(path)
	if err != nil {
		return Progress{}, fmt.Errorf("worker: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProgressSize+1))
	if err != nil {
		return Progress{}, fmt.Errorf("worker: %w", err)
	}
	p, err := DecodeProgress(b)
	if err != nil {
		return Progress{}, fmt.Errorf("%w %s: %w", ErrBadProgress, path, err)
	}
	return p, nil
}

// DecodeProgress decodes a progress file's content; unknown fields are
// ignored (the library may add some), impossible values are refused.
func DecodeProgress(b []byte) (Progress, error) {
	var p Progress
	if len(b) > maxProgressSize {
		return p, fmt.Errorf("larger than %d bytes", maxProgressSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return Progress{}, err
	}
	if dec.More() {
		return Progress{}, errors.New("trailing data")
	}
	// (JSON has no NaN or infinity: the decoder refuses them.)
	switch {
	case p.Job == "":
		return Progress{}, errors.New("no job")
	case p.Epoch < 0 || p.Position < 0 || p.Progress < 0:
		return Progress{}, fmt.Errorf("epoch %d, position %d, progress %v", p.Epoch, p.Position, p.Progress)
	}
	for i, r := range p.Runs {
		if r.Incarnation == 0 || r.Replicas < 1 || r.Nodes < 1 || r.AtomicBatch < 1 || r.AccumSteps < 0 ||
			r.BatchSize != r.Replicas*r.AtomicBatch*(r.AccumSteps+1) || r.Epoch < 0 || r.Progress < 0 {
			return Progress{}, fmt.Errorf("run %d: %+v", i, r)
		}
	}
	return p, nil
}
