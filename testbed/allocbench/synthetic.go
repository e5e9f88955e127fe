package allocbench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"

	"gonum.org/v1/gonum/stat"

	"pollux/internal/usage"
	"pollux/optimizer"
)

// Options are the synthetic mode's settings (`pollux bench allocator
// --gpus G`).
type Options struct {
	// GPUs of the cluster on nodes of GPUsPerNode GPUs (0: 4 up to 2048
	// GPUs, 8 above), Jobs active jobs (0: GPUs/2), Rounds rounds timed.
	GPUs, GPUsPerNode, Jobs, Rounds int
	Seed                            uint64
	// Compare also runs the reference-shaped GA and the greedy baseline
	// on the first round.
	Compare bool
	// Racks of consecutive nodes. The synthetic jobs have no
	// measurements to fit a cross-rack term on, so CrossRackRatio gives
	// them one: synchronising across two racks adds ratio - 1 times their
	// inter-node alpha (goodput.Params.AlphaX). CompareFlat times the
	// search rack by rack and the flat one, each over its own chain of
	// rounds.
	Racks          int
	CrossRackRatio float64
	CompareFlat    bool
}

// defaults fills in the defaults and refuses options it cannot run.
func (o *Options) defaults() error {
	if o.GPUs < 1 {
		return usage.Errorf("give --gpus G (at least 1) or --snapshots DIR")
	}
	if o.GPUsPerNode == 0 {
		o.GPUsPerNode = 4
		if o.GPUs > 2048 {
			o.GPUsPerNode = 8
		}
	}
	if o.Jobs == 0 {
		o.Jobs = max(1, o.GPUs/2)
	}
	if o.GPUsPerNode < 1 || o.Jobs < 1 || o.Rounds < 1 || o.Racks < 1 {
		return usage.Errorf("--gpus-per-node %d, --jobs %d, --rounds %d, --racks %d: all must be at least 1", o.GPUsPerNode, o.Jobs, o.Rounds, o.Racks)
	}
	if !(o.CrossRackRatio >= 1) || math.IsInf(o.CrossRackRatio, 0) {
		return usage.Errorf("--cross-rack-ratio %v: want a finite ratio of at least 1", o.CrossRackRatio)
	}
	if o.CompareFlat && o.Racks < 2 {
		return usage.Errorf("--compare-flat needs --racks of at least 2")
	}
	return nil
}

// Report is what `pollux bench allocator --json` prints in the
// synthetic mode.
type Report struct {
	GPUs        int     `json:"gpus"`
	GPUsPerNode int     `json:"gpus_per_node"`
	Nodes       int     `json:"nodes"`
	Jobs        int     `json:"jobs"`
	Rounds      int     `json:"rounds"`
	Seed        uint64  `json:"seed"`
	MedianS     float64 `json:"median_round_s"`
	P95S        float64 `json:"p95_round_s"`
	MaxS        float64 `json:"max_round_s"`
	// Fitness is the last round's; FirstFitness the first (cold) round's,
	// CurrentFitness that of the first round's current allocation.
	Fitness        float64 `json:"fitness"`
	FirstFitness   float64 `json:"first_round_fitness"`
	CurrentFitness float64 `json:"current_fitness"`
	Population     int     `json:"population"`
	Generations    int     `json:"generations"`
	Evaluations    int     `json:"evaluations"`
	// With --compare, the baselines on the first round's snapshot.
	Compare *Compare `json:"compare,omitempty"`
	// Racks and CrossRackRatio describe the topology (--racks);
	// Hierarchical reports that the rounds were searched rack by rack.
	Racks          int     `json:"racks"`
	CrossRackRatio float64 `json:"cross_rack_ratio,omitempty"`
	Hierarchical   bool    `json:"hierarchical"`
	// With --compare-flat, the flat search on the same first snapshot and
	// its own chain of rounds.
	CompareFlat *FlatCompare `json:"compare_flat,omitempty"`
}

// FlatCompare is the flat search's figures next to the hierarchical ones.
type FlatCompare struct {
	MedianS      float64 `json:"median_round_s"`
	P95S         float64 `json:"p95_round_s"`
	MaxS         float64 `json:"max_round_s"`
	Fitness      float64 `json:"fitness"`
	FirstFitness float64 `json:"first_round_fitness"`
	// FitnessRatio is hierarchical / flat fitness (last round),
	// FirstFitnessRatio the same on the first round (the very same
	// snapshot), TimeRatio hierarchical / flat median round time.
	FitnessRatio      float64 `json:"fitness_ratio"`
	FirstFitnessRatio float64 `json:"first_round_fitness_ratio"`
	TimeRatio         float64 `json:"time_ratio"`
}

// Compare is the baselines on the first round's snapshot.
type Compare struct {
	ReferenceGAFitness float64 `json:"reference_ga_fitness"`
	ReferenceGAS       float64 `json:"reference_ga_s"`
	GreedyFitness      float64 `json:"greedy_fitness"`
	GreedyS            float64 `json:"greedy_s"`
}

// SnapshotResult is one artifact snapshot in `--snapshots` mode.
type SnapshotResult struct {
	Jobs             int     `json:"jobs"`
	CurrentFitness   float64 `json:"current_fitness"`
	Fitness          float64 `json:"fitness"`
	RoundS           float64 `json:"round_s"`
	ReferenceCurrent float64 `json:"reference_current_fitness"`
	ReferenceFitness float64 `json:"reference_fitness"`
}

// Synthetic checks o, fills in its defaults and times its rounds: the
// first from a cold start, each next one warm-started from the one
// before.
func Synthetic(o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	snap, err := optimizer.Synthetic(o.GPUs, o.GPUsPerNode, o.Jobs, o.Seed)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	rep := &Report{GPUs: o.GPUs, GPUsPerNode: o.GPUsPerNode, Nodes: len(snap.Nodes), Jobs: o.Jobs, Rounds: o.Rounds, Seed: o.Seed, Racks: o.Racks}
	if o.Racks > 1 {
		if err := optimizer.AssignRacks(snap, o.Racks); err != nil {
			return nil, usage.Errorf("--racks: %w", err)
		}
		for j := range snap.Jobs {
			if md := snap.Jobs[j].Model; md != nil {
				x := *md
				x.Params.AlphaX = (o.CrossRackRatio - 1) * x.Params.AlphaN
				snap.Jobs[j].Model = &x
			}
		}
		rep.CrossRackRatio = o.CrossRackRatio
	}
	first := *snap
	first.Jobs = slices.Clone(snap.Jobs)
	if o.Compare {
		rep.Compare = &Compare{}
		for _, p := range []optimizer.Policy{optimizer.NewRefGA(), optimizer.NewGreedy()} {
			start := time.Now()
			res, err := p.Allocate(snap, nil)
			if err != nil {
				return nil, err
			}
			spent := time.Since(start).Seconds()
			if p.Name() == "greedy" {
				rep.Compare.GreedyFitness, rep.Compare.GreedyS = res.Diagnostics.Fitness, spent
			} else {
				rep.Compare.ReferenceGAFitness, rep.Compare.ReferenceGAS = res.Diagnostics.Fitness, spent
			}
		}
	}
	pol := optimizer.NewPollux()
	if o.CompareFlat {
		pol.Hierarchy = optimizer.HierarchyRacks
	}
	rep.Hierarchical = pol.Hierarchical(snap)
	ch, err := runChain(pol, snap, o.Seed, o.Rounds)
	if err != nil {
		return nil, err
	}
	rep.MedianS, rep.P95S, rep.MaxS = ch.median, ch.p95, ch.max
	rep.FirstFitness, rep.CurrentFitness, rep.Fitness = ch.first.Diagnostics.Fitness, ch.first.Diagnostics.CurrentFitness, ch.last.Diagnostics.Fitness
	rep.Generations, rep.Evaluations, rep.Population = ch.last.Diagnostics.Generations, ch.last.Diagnostics.Evaluations, len(ch.last.State.Population)
	if o.CompareFlat {
		flat := optimizer.NewPollux()
		flat.Hierarchy = optimizer.HierarchyFlat
		fc, err := runChain(flat, &first, o.Seed, o.Rounds)
		if err != nil {
			return nil, err
		}
		rep.CompareFlat = &FlatCompare{MedianS: fc.median, P95S: fc.p95, MaxS: fc.max,
			Fitness: fc.last.Diagnostics.Fitness, FirstFitness: fc.first.Diagnostics.Fitness,
			FitnessRatio:      rep.Fitness / fc.last.Diagnostics.Fitness,
			FirstFitnessRatio: rep.FirstFitness / fc.first.Diagnostics.Fitness,
			TimeRatio:         rep.MedianS / fc.median,
		}
	}
	return rep, nil
}

// chain is a run of warm-started rounds: the first and last results and
// the round times' median, p95 and largest.
type chain struct {
	first, last      optimizer.Result
	median, p95, max float64
}

// runChain runs rounds rounds of pol from snap (modified: each round's
// allocation becomes the next one's current allocation), round r with
// seed seed+r, and times them.
func runChain(pol optimizer.Policy, snap *optimizer.Snapshot, seed uint64, rounds int) (chain, error) {
	var ch chain
	var prev *optimizer.State
	times := make([]float64, 0, rounds)
	for r := 0; r < rounds; r++ {
		snap.Seed = seed + uint64(r)
		start := time.Now()
		res, err := pol.Allocate(snap, prev)
		if err != nil {
			return ch, err
		}
		times = append(times, time.Since(start).Seconds())
		if r == 0 {
			ch.first = res
		}
		ch.last = res
		prev = res.State
		advanceRound(snap, res.Placements)
	}
	slices.Sort(times)
	ch.median = stat.Quantile(0.5, stat.Empirical, times, nil)
	ch.p95 = stat.Quantile(0.95, stat.Empirical, times, nil)
	ch.max = times[len(times)-1]
	return ch, nil
}

// advanceRound moves snap one 60 s interval on: the allocation becomes current,
// jobs age and attain service, and moved jobs count a restart.
func advanceRound(snap *optimizer.Snapshot, alloc []optimizer.Placement) {
	const interval = 60.0
	snap.Now += interval
	for j := range snap.Jobs {
		job := &snap.Jobs[j]
		job.Age += interval
		job.Attained += interval * float64(alloc[j].Replicas())
		if !job.Current.Equal(alloc[j]) && len(alloc[j]) > 0 {
			job.Restarts++
		}
		job.Current = alloc[j]
	}
}

// WriteTable prints the report as a table.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "GPUs\tnodes\tracks\tjobs\trounds\tsearch\tmedian s\tp95 s\tfitness\tfirst round\tcurrent\n")
	search := "flat"
	if rep.Hierarchical {
		search = "by rack"
	}
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t%.4f\t%.4f\t%.5f\t%.5f\t%.5f\n", rep.GPUs, rep.Nodes, rep.Racks, rep.Jobs, rep.Rounds,
		search, rep.MedianS, rep.P95S, rep.Fitness, rep.FirstFitness, rep.CurrentFitness)
	if c := rep.CompareFlat; c != nil {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\tflat\t%.4f\t%.4f\t%.5f\t%.5f\t%.5f\n", rep.GPUs, rep.Nodes, rep.Racks, rep.Jobs, rep.Rounds,
			c.MedianS, c.P95S, c.Fitness, c.FirstFitness, rep.CurrentFitness)
	}
	if c := rep.Compare; c != nil {
		fmt.Fprintf(tw, "\nfirst round\tfitness\ttime s\n")
		fmt.Fprintf(tw, "reference GA\t%.5f\t%.3f\n", c.ReferenceGAFitness, c.ReferenceGAS)
		fmt.Fprintf(tw, "greedy\t%.5f\t%.3f\n", c.GreedyFitness, c.GreedyS)
	}
	return tw.Flush()
}
