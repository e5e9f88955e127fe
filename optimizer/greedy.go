package optimizer

import "slices"

// Greedy is the baseline without a population: the current allocation,
// repaired, then hill-climbed (the same climber Pollux polishes with) until
// no single-job move improves the objective. It shows what the genetic
// search adds.
type Greedy struct {
	PowerMean float64
	// MeasuredRestart is Pollux.MeasuredRestart: a federation reclaim's
	// what-if round decided greedily is then judged by the objective the
	// leader's Pollux searches with.
	MeasuredRestart bool
}

// NewGreedy returns the greedy baseline with p = -1.
func NewGreedy() *Greedy { return &Greedy{PowerMean: DefaultPowerMean} }

// Name implements Policy.
func (g *Greedy) Name() string { return "greedy" }

// Allocate implements Policy.
func (g *Greedy) Allocate(snap *Snapshot, _ *State) (Result, error) {
	obj, err := newObjective(snap, g.PowerMean, nil, g.MeasuredRestart)
	if err != nil {
		return Result{}, err
	}
	pr := newProblem(obj)
	res := Result{Diagnostics: Diagnostics{CurrentFitness: obj.Fitness(obj.current)}}
	w := pr.newWorker()
	w.reseed(snap.Seed, 0, 0)
	ind := pr.newIndiv()
	copy(ind.alloc, obj.current)
	w.repair(ind)
	pr.evaluate(ind)
	pr.newClimber().improve(ind)
	res.Placements = make([]Placement, pr.jobs)
	for j, pl := range ind.alloc {
		res.Placements[j] = slices.Clone(pl)
	}
	res.Diagnostics.Fitness = obj.Fitness(res.Placements)
	res.Diagnostics.Evaluations = 1
	return res, nil
}
