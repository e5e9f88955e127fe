package optimizer

import (
	"fmt"
	"math/rand/v2"

	"pollux/optimizer/goodput"
)

// archetype is a family of made-up but fitted-looking job models (the
// magnitudes of image, language, speech, detection and recommendation
// training jobs).
type archetype struct {
	params  goodput.Params
	grad    goodput.GradStats
	limits  goodput.Limits
	maxRepl int
}

var archetypes = []archetype{
	{goodput.Params{AlphaC: 0.015, BetaC: 7e-4, AlphaN: 0.15, BetaN: 1e-3, AlphaR: 0.02, BetaR: 2e-3, Gamma: 2},
		goodput.GradStats{GradSqr: 0.05, GradVar: 3}, goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 1024, Accumulation: true}, 64},
	{goodput.Params{AlphaC: 0.08, BetaC: 4e-3, AlphaN: 0.45, BetaN: 4e-3, AlphaR: 0.12, BetaR: 1e-4, Gamma: 3},
		goodput.GradStats{GradSqr: 0.2, GradVar: 6}, goodput.Limits{InitBatch: 200, MaxBatch: 12800, MinLocal: 20, MaxLocal: 200, Accumulation: true}, 64},
	{goodput.Params{AlphaC: 0.12, BetaC: 0.06, AlphaN: 1.0, BetaN: 1e-3, AlphaR: 0.05, BetaR: 5e-3, Gamma: 1},
		goodput.GradStats{GradSqr: 1, GradVar: 1000}, goodput.Limits{InitBatch: 12, MaxBatch: 384, MinLocal: 4, MaxLocal: 12, Accumulation: true}, 64},
	{goodput.Params{AlphaC: 0.22, BetaC: 0.025, AlphaN: 1.3, BetaN: 0.01, AlphaR: 0.3, BetaR: 0.1, Gamma: 2.5},
		goodput.GradStats{GradSqr: 0.05, GradVar: 1.1}, goodput.Limits{InitBatch: 20, MaxBatch: 640, MinLocal: 10, MaxLocal: 80, Accumulation: true}, 64},
	{goodput.Params{AlphaC: 0.22, BetaC: 0.016, AlphaN: 1.2, BetaN: 1e-3, AlphaR: 0.16, BetaR: 0.09, Gamma: 2},
		goodput.GradStats{GradSqr: 100, GradVar: 20000}, goodput.Limits{InitBatch: 8, MaxBatch: 512, MinLocal: 4, MaxLocal: 8, Accumulation: true}, 64},
	{goodput.Params{AlphaC: 0.007, BetaC: 1e-6, AlphaN: 0.01, BetaN: 1e-3, AlphaR: 0.005, BetaR: 1e-3, Gamma: 1},
		goodput.GradStats{GradSqr: 5000, GradVar: 2e8}, goodput.Limits{InitBatch: 256, MaxBatch: 32768, MinLocal: 32, MaxLocal: 32768, Accumulation: true}, 1},
}

// Synthetic builds a seeded synthetic round for benchmarks and tests:
// gpus GPUs on nodes of perNode GPUs (the last takes the remainder) and
// jobs active jobs of mixed kinds and sizes, one in ten without a model,
// with ages, attained service, restarts (at most one per 300 s of age),
// power-of-two max_replicas and, for about four in five, a valid current
// allocation. The same arguments always give the same snapshot.
func Synthetic(gpus, perNode, jobs int, seed uint64) (*Snapshot, error) {
	if gpus <= 0 || perNode <= 0 || jobs < 0 {
		return nil, fmt.Errorf("%w: synthetic cluster of %d GPUs, %d per node, %d jobs", ErrBadSnapshot, gpus, perNode, jobs)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	snap := &Snapshot{Seed: seed, Now: 1e5}
	for g, i := gpus, 0; g > 0; i++ {
		n := min(perNode, g)
		snap.Nodes = append(snap.Nodes, Node{ID: fmt.Sprintf("node-%04d", i), GPUs: n})
		g -= n
	}
	jitter := func(v float64) float64 { return v * (0.7 + 0.7*rng.Float64()) }
	for j := 0; j < jobs; j++ {
		a := archetypes[rng.IntN(len(archetypes))]
		age := 60 + rng.Float64()*20000
		job := Job{
			ID:          fmt.Sprintf("job-%05d", j),
			SubmitTime:  snap.Now - age,
			Age:         age,
			Attained:    age * float64(rng.IntN(8)) * rng.Float64(),
			Restarts:    rng.IntN(min(6, int(age/300)+1)),
			MaxReplicas: min(a.maxRepl, 1<<rng.IntN(7)),
		}
		if rng.IntN(10) > 0 {
			md := goodput.Model{
				Params: goodput.Params{
					AlphaC: jitter(a.params.AlphaC), BetaC: jitter(a.params.BetaC),
					AlphaN: jitter(a.params.AlphaN), BetaN: jitter(a.params.BetaN),
					AlphaR: jitter(a.params.AlphaR), BetaR: jitter(a.params.BetaR),
					Gamma: min(10, max(1, jitter(a.params.Gamma))),
				},
				Grad:   goodput.GradStats{GradSqr: jitter(a.grad.GradSqr), GradVar: jitter(a.grad.GradVar)},
				Limits: a.limits,
			}
			job.Model = &md
		}
		snap.Jobs = append(snap.Jobs, job)
	}
	placeCurrent(snap, rng)
	return snap, nil
}

// placeCurrent gives about four jobs in five a current allocation of a
// random size up to their max_replicas, first-fit over the nodes.
func placeCurrent(snap *Snapshot, rng *rand.Rand) {
	free := make([]int, len(snap.Nodes))
	owner := make([]bool, len(snap.Nodes))
	for n, node := range snap.Nodes {
		free[n] = node.GPUs
	}
	for _, j := range rng.Perm(len(snap.Jobs)) {
		job := &snap.Jobs[j]
		if rng.IntN(5) == 0 {
			continue
		}
		want := 1 + rng.IntN(job.MaxReplicas)
		// A single node if one fits the whole job, else spread over nodes
		// without another distributed job.
		var pl Placement
		for n := range free {
			if free[n] >= want {
				pl = Placement{{Node: n, Count: want}}
				break
			}
		}
		if pl == nil {
			left := want
			for n := range free {
				if left == 0 || len(pl) == MaxJobNodes {
					break
				}
				if free[n] > 0 && !owner[n] {
					c := min(free[n], left)
					pl = append(pl, NodeCount{Node: n, Count: c})
					left -= c
				}
			}
			if len(pl) > 1 {
				for _, nc := range pl {
					owner[nc.Node] = true
				}
			}
		}
		for _, nc := range pl {
			free[nc.Node] -= nc.Count
		}
		job.Current = pl
	}
}

// AssignRacks puts snap's nodes into racks racks of consecutive nodes (as
// even as the node count allows: the first racks take one node more),
// named rack-0000, rack-0001, ..., and sets the topology to the rack
// alone. It fails when racks is not in [1, nodes].
func AssignRacks(snap *Snapshot, racks int) error {
	if racks < 1 || racks > len(snap.Nodes) {
		return fmt.Errorf("%w: %d racks for %d nodes", ErrBadSnapshot, racks, len(snap.Nodes))
	}
	per, extra := len(snap.Nodes)/racks, len(snap.Nodes)%racks
	n := 0
	for r := 0; r < racks; r++ {
		size := per
		if r < extra {
			size++
		}
		name := fmt.Sprintf("rack-%04d", r)
		for i := 0; i < size; i++ {
			snap.Nodes[n].Topology = []string{name}
			n++
		}
	}
	snap.Levels = nil
	return nil
}
