package controlplane

import (
	"fmt"
	"slices"

	"gonum.org/v1/gonum/stat"

	"pollux/actors/allocator"
	"pollux/optimizer"
)

// Round is one round as the report shows it: its time, and its decision
// against a search of full effort on the same input (the round's
// snapshot and previous state).
type Round struct {
	Server     string  `json:"server"`
	Generation uint64  `json:"generation"`
	RoundS     float64 `json:"round_s"`
	// DecidedS is the part of RoundS from the tick to the round's
	// commit (the search and the Raft write); the rest is the
	// assignments reaching the nodes and their acknowledgements.
	DecidedS float64 `json:"decided_s"`
	// SentS runs from the tick to the last assignment handed to the
	// transport, AckMedianS to the median node's acknowledgement.
	SentS      float64 `json:"sent_s"`
	AckMedianS float64 `json:"ack_median_s"`
	// Policy decided the round: pollux (the search, at SearchEffort; the
	// least, 1/64, in a new leader's first round).
	Policy string `json:"policy"`
	// SearchEffort is the round's search work as a fraction of the full
	// search's on the same input: its individuals evaluated over the full
	// search's.
	SearchEffort float64 `json:"search_effort"`
	// Fitness is the round's (Pollux's objective); FullFitness that of a
	// search of full effort on the same input; FitnessVsFull their ratio.
	Fitness       float64 `json:"fitness"`
	FullFitness   float64 `json:"full_fitness"`
	FitnessVsFull float64 `json:"fitness_vs_full"`
	Jobs          int     `json:"jobs"`
	GPUsUsed      int     `json:"gpus_used"`
	// Nodes were sent the round's assignments; Acked answered in time.
	Nodes int `json:"nodes"`
	Acked int `json:"acked"`
}

// MinMedian are two quantiles of a sample.
type MinMedian struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
}

// policyOf builds the policy a round names, at the round's effort.
func policyOf(ri allocator.RoundInfo) (optimizer.Policy, error) {
	// The bench's servers run the allocator's default, which prices
	// restarts at the jobs' measured delays, in a leadership's first
	// round (a search of the least effort) too.
	p, err := optimizer.Lookup(ri.Policy, optimizer.Options{MeasuredRestart: true})
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if b, ok := p.(optimizer.Budgeted); ok && ri.SearchEffort > 0 {
		b.SetEffort(ri.SearchEffort)
	}
	return p, nil
}

// judge compares a round's decision with a search of full effort on
// the same input. It first decides the round again with the round's own
// policy and effort, which must reach the round's fitness exactly (the
// search is seeded): otherwise the input is not the round's, and the
// comparison would mean nothing.
func judge(server string, ri allocator.RoundInfo) (Round, error) {
	r := Round{Server: server, Generation: ri.Generation, RoundS: ri.Duration.Seconds(), DecidedS: ri.Decided.Seconds(),
		SentS: ri.Sent.Seconds(), AckMedianS: ri.AckMedian.Seconds(), Policy: ri.Policy, Fitness: ri.Fitness,
		Jobs: ri.Jobs, GPUsUsed: ri.GPUsUsed, Nodes: ri.Nodes, Acked: ri.Acked}
	if ri.Snapshot == nil {
		return r, fmt.Errorf("controlplane: round %d decided nothing: no jobs or no nodes", ri.Generation)
	}
	p, err := policyOf(ri)
	if err != nil {
		return r, err
	}
	again, err := p.Allocate(ri.Snapshot, ri.Prev)
	if err != nil {
		return r, fmt.Errorf("controlplane: round %d again: %w", ri.Generation, err)
	}
	if again.Diagnostics.Fitness != ri.Fitness {
		return r, fmt.Errorf("controlplane: round %d decided again by %s at effort %v reaches fitness %v, not the round's %v",
			ri.Generation, ri.Policy, ri.SearchEffort, again.Diagnostics.Fitness, ri.Fitness)
	}
	// The full search prices restarts as the round's policy did: the
	// two fitnesses are of one objective.
	fp, err := optimizer.Lookup("pollux", optimizer.Options{MeasuredRestart: true})
	if err != nil {
		return r, fmt.Errorf("controlplane: %w", err)
	}
	full, err := fp.Allocate(ri.Snapshot, ri.Prev)
	if err != nil {
		return r, fmt.Errorf("controlplane: round %d at full effort: %w", ri.Generation, err)
	}
	r.FullFitness = full.Diagnostics.Fitness
	if !(r.FullFitness > 0) {
		return r, fmt.Errorf("controlplane: round %d: fitness %v at full effort", ri.Generation, r.FullFitness)
	}
	r.FitnessVsFull = ri.Fitness / r.FullFitness
	if ri.SearchEffort > 0 && full.Diagnostics.Evaluations > 0 {
		r.SearchEffort = float64(again.Diagnostics.Evaluations) / float64(full.Diagnostics.Evaluations)
	}
	return r, nil
}

// minMedian summarises xs (zero if empty).
func minMedian(xs []float64) MinMedian {
	if len(xs) == 0 {
		return MinMedian{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return MinMedian{Min: s[0], Median: stat.Quantile(0.5, stat.Empirical, s, nil)}
}
