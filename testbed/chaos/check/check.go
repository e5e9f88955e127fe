package check

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/linear"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
)

// ErrHistory is a history the checker cannot judge: empty, truncated, or
// inconsistent in itself.
var ErrHistory = errors.New("check: unusable history")

// Invariant names what a violation breaks.
type Invariant string

// The invariants; docs/reliability.md says what observes each.
const (
	// GPUExclusive: no GPU of a node is used by two worker processes at
	// overlapping times (worker records, harness pid observations).
	GPUExclusive Invariant = "gpu-exclusive"
	// WorkerEnded: every worker's life ends in the history: its own exit
	// record or the harness seeing its pid gone.
	WorkerEnded Invariant = "worker-ended"
	// StaleCheckpoint: no worker restores a checkpoint written by an
	// incarnation that a newer one had already replaced.
	StaleCheckpoint Invariant = "stale-checkpoint"
	// LostProgress: no worker restores less progress than a checkpoint
	// an older, not superseded incarnation had finished writing before
	// the restore began.
	LostProgress Invariant = "lost-progress"
	// CompletionBacked: a job the API shows completed has a done record
	// written, before the read returned, by a worker of the incarnation
	// the API shows.
	CompletionBacked Invariant = "completion-backed"
	// RanAfterFinish: no worker of a job starts after a linearizable read
	// showed it completed, or after its cancel was acknowledged, in a
	// later incarnation than the one it completed or was cancelled in (a
	// cancel whose answer names no incarnation: in any); and a worker of
	// the cancelled incarnation that starts after the cancel was
	// acknowledged (its assignment was on its way) ends within
	// cancelStopWithin of it; a late rank of the completed incarnation
	// (queued when rank 0 finished) starts at most once and ends within
	// lateRankWithin of the completion read.
	RanAfterFinish Invariant = "ran-after-finish"
	// ExistsBeforeSubmit: no submission is answered "exists" unless one
	// was sent before.
	ExistsBeforeSubmit Invariant = "exists-before-submit"
	// Linearizable: the API's linearizable operations are (package
	// linear); one violation per partition that is not.
	Linearizable Invariant = "linearizable"
)

// Violation is one breach.
type Violation struct {
	Invariant Invariant
	// At is when it happened (CLOCK_MONOTONIC), Detail says what, with
	// times relative to the start of the run.
	At     int64
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s", v.Invariant, v.Detail) }

// Input is what the observers wrote.
type Input struct {
	History []history.Line
	Workers []record.Worker
}

// Options tune Check.
type Options struct {
	// Linear is passed to the linearizability check.
	Linear linear.Options
}

// Result is the judgement of a run.
type Result struct {
	Scenario string
	Seed     uint64
	Outcomes Outcomes
	Metrics  Metrics
	// Violations are ordered by time.
	Violations []Violation
	// Linear is the linearizability check's result.
	Linear linear.Result
	// Epoch is the run's first timestamp; Duration its length.
	Epoch    int64
	Duration time.Duration
}

// Failures lists every reason the run fails, in words; none means it
// passes: no lost, failed or unsubmitted job, no violation, linearizable,
// every planned fault injected, a failover after every fault that deposed
// the leader and a re-placement after every agent death that needed one.
func (r *Result) Failures() []string {
	var out []string
	o, m := r.Outcomes, r.Metrics
	if o.Lost > 0 {
		out = append(out, fmt.Sprintf("%d lost jobs (%s)", o.Lost, strings.Join(o.names(Lost), ", ")))
	}
	if o.Unsubmitted > 0 {
		out = append(out, fmt.Sprintf("%d unsubmitted jobs (%s)", o.Unsubmitted, strings.Join(o.names(Unsubmitted), ", ")))
	}
	if o.Failed > 0 {
		out = append(out, fmt.Sprintf("%d failed jobs (%s)", o.Failed, strings.Join(o.names(Failed), "; ")))
	}
	for _, v := range r.Violations {
		out = append(out, v.String())
	}
	if len(r.Linear.Unknown) > 0 {
		out = append(out, fmt.Sprintf("linearizability undecided within the timeout: %s", strings.Join(r.Linear.Unknown, ", ")))
	}
	for _, f := range m.NotInjected {
		out = append(out, "fault scheduled but not injected: "+f)
	}
	for _, f := range m.FailoversMissing {
		out = append(out, "no failover observed after "+f)
	}
	for _, f := range m.ReplacementsMissing {
		out = append(out, "no re-placement observed after "+f)
	}
	return out
}

// Check judges a run.
func Check(in Input, o Options) (*Result, error) {
	r, err := parse(in.History)
	if err != nil {
		return nil, err
	}
	workers, err := lives(r, in.Workers)
	if err != nil {
		return nil, err
	}
	res := &Result{Scenario: r.begin.Scenario, Seed: r.begin.Seed, Epoch: r.epoch, Duration: time.Duration(r.end - r.epoch)}
	res.Outcomes = outcomes(r, workers)
	var vs []Violation
	vs = append(vs, checkGPUs(r, workers)...)
	vs = append(vs, checkEnded(r, workers)...)
	vs = append(vs, checkCheckpoints(r, workers)...)
	vs = append(vs, checkCompletions(r, workers)...)
	vs = append(vs, checkExists(r)...)
	res.Linear, err = linear.Check(in.History, o.Linear)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHistory, err)
	}
	for _, f := range res.Linear.Illegal {
		vs = append(vs, Violation{Linearizable, r.end, f.String()})
	}
	slices.SortStableFunc(vs, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Invariant, b.Invariant))
	})
	res.Violations = vs
	res.Metrics = measure(r, workers)
	return res, nil
}

// at formats a timestamp relative to the run's start.
func (r *run) at(t int64) string { return mono.Seconds(t, r.epoch) }
