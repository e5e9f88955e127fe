package worker

import (
	"fmt"
	"strconv"

	"pollux/actors/jobspec"
)

// Example is one of the real example jobs of train_digits.py: a model of
// scikit-learn's bundled digits and the test accuracy that completes it.
type Example struct {
	// Model is the script's --model: "mlp" or "cnn".
	Model string
	// Target is the test accuracy at which training is complete.
	Target float64
	// InitBatch is M0, the batch the learning rate is tuned for.
	InitBatch int
	// MaxBatch, MinLocal and MaxLocal bound the batch sizes the scheduler
	// may choose; Accumulation allows gradient accumulation.
	MaxBatch, MinLocal, MaxLocal int
	Accumulation                 bool
}

// Examples are the example jobs.
var Examples = []Example{
	{Model: "mlp", Target: 0.95, InitBatch: 32, MaxBatch: 512, MinLocal: 8, MaxLocal: 256, Accumulation: true},
	{Model: "cnn", Target: 0.97, InitBatch: 32, MaxBatch: 512, MinLocal: 8, MaxLocal: 256, Accumulation: true},
}

// Command is the worker command of e: l's interpreter running l's
// train_digits.py, followed by args.
func (e Example) Command(l Layout, args ...string) []string {
	python := l.Python
	if python == "" {
		python = Python
	}
	cmd := []string{python, l.Digits, "--model", e.Model,
		"--target", strconv.FormatFloat(e.Target, 'g', -1, 64)}
	return append(cmd, args...)
}

// Spec is the job specification of e named name, running from l, with
// checkpoints in checkpointDir (empty: the server chooses) and args added
// to the command.
func (e Example) Spec(name string, l Layout, checkpointDir string, args ...string) (jobspec.Spec, error) {
	s := jobspec.Spec{
		Name: name, Command: e.Command(l, args...),
		MinReplicas: 1, MaxReplicas: jobspec.DefaultMaxReplicas,
		InitBatch: e.InitBatch, MaxBatch: e.MaxBatch,
		MinLocalBatch: e.MinLocal, MaxLocalBatch: e.MaxLocal,
		Accumulation: e.Accumulation, CheckpointDir: checkpointDir,
	}
	if err := s.Validate(); err != nil {
		return jobspec.Spec{}, fmt.Errorf("worker: example %s: %w", e.Model, err)
	}
	return s, nil
}
