package worker

import (
	"fmt"
	"path/filepath"
	"strconv"

	"pollux/actors/jobspec"
)

// Example is one of the real example jobs: a model trained by one of the
// example scripts until a metric reaches its target.
type Example struct {
	// Script is the example script in the installed library's directory:
	// train_digits.py (scikit-learn's bundled digits) or train_lm.py (a
	// character-level language model of Python's standard library).
	Script string
	// Model is the script's --model: "mlp" or "cnn" (digits),
	// "transformer" (the language model).
	Model string
	// Metric is what the script records in its progress metrics and
	// stops on: "accuracy" (test accuracy, complete at or above Target)
	// or "loss" (validation loss in nats per byte, complete at or below
	// Target).
	Metric string
	// Target is the value of Metric at which training is complete.
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
	{Script: "train_digits.py", Model: "mlp", Metric: "accuracy", Target: 0.95, InitBatch: 32, MaxBatch: 512, MinLocal: 8, MaxLocal: 256, Accumulation: true},
	{Script: "train_digits.py", Model: "cnn", Metric: "accuracy", Target: 0.97, InitBatch: 32, MaxBatch: 512, MinLocal: 8, MaxLocal: 256, Accumulation: true},
	{Script: "train_lm.py", Model: "transformer", Metric: "loss", Target: LMTarget, InitBatch: 32, MaxBatch: 512, MinLocal: 4, MaxLocal: 64, Accumulation: true},
}

// LMTarget is the language model's target validation loss (nats per
// byte).
const LMTarget = 1.8

// Reached reports whether v, a value of e's metric, completes e.
func (e Example) Reached(v float64) bool {
	if e.Metric == "loss" {
		return v <= e.Target
	}
	return v >= e.Target
}

// Command is the worker command of e: l's interpreter running e's script
// in l, followed by args.
func (e Example) Command(l Layout, args ...string) []string {
	python := l.Python
	if python == "" {
		python = Python
	}
	cmd := []string{python, filepath.Join(l.Dir, e.Script), "--model", e.Model,
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
