package optimizer

import (
	"math"
	"runtime"
	"slices"
	"sync"
)

// Search budget defaults. The population and the number of generations
// shrink for large rounds so that the work, population x generations x
// jobs, stays near defaultWork (a round of 4096 jobs then takes a few
// seconds on two cores).
const (
	defaultPopulation  = 64
	defaultGenerations = 40
	minPopulation      = 8
	minGenerations     = 10
	defaultWork        = 1.5e6
	// finalClimbs is how many of the final population's best individuals
	// the hill climber polishes.
	finalClimbs = 4
)

// Pollux is the Pollux allocator: a genetic search over per-job sparse
// placements (a job spans at most MaxJobNodes nodes) with the spec's
// crossover, mutations and repair, seeded from the previous round's
// population, the current allocation and a hill-climbed copy of it, with
// the best individual hill-climbed again at the end. Children of one
// generation are built in parallel by Workers goroutines, each child from
// its own random stream, so the result does not depend on scheduling.
type Pollux struct {
	// PowerMean is the fairness exponent p of the objective.
	PowerMean float64
	// Population and Generations size the search; 0 picks a default that
	// shrinks with the number of jobs.
	Population, Generations int
	// Effort scales the default's work (population x generations) by a
	// factor in (0, 1]; 0 means 1. A caller bounds a round's time with it
	// on a loaded machine.
	Effort float64
	// Workers is how many goroutines build children; 0 means
	// min(2, GOMAXPROCS).
	Workers int
	// Cache, if set, carries memoised speedups from round to round (it
	// never changes results, only their cost).
	Cache *SpeedupCache
	// Hierarchy selects, on a cluster of several racks, whether the round
	// is searched rack by rack (see allocateHier) or over the whole
	// cluster at once; the zero value decides by the round's size.
	Hierarchy Hierarchy
	// MeasuredRestart prices a job's restart at the delay it measured
	// (Job.RestartDelay) where it has one, as the running system does;
	// without it every restart costs RestartDelay, as in the paper's and
	// Sia's simulators, whose figures the trace-driven testbed
	// reproduces.
	MeasuredRestart bool
	// PreviousOnly starts a round's search from the previous round's
	// population alone once there is one, as the artifacts' NSGA-II
	// does (its first generation is the previous final population; the
	// current allocation enters only through the mutation that resets a
	// job to it). Without it the current allocation and a hill-climbed
	// copy of it are seeded too. Sia's type-blind Pollux runs this way
	// (PolluxUnaware): seeded with the repaired current allocation, the
	// search settles on allocations of one type and idles about half as
	// many GPUs to the repair as the artifact's (docs/fidelity.md).
	PreviousOnly bool
}

// NewPollux returns the policy with the paper's p = -1, the default budget
// and a speedup cache.
func NewPollux() *Pollux { return &Pollux{PowerMean: DefaultPowerMean, Cache: &SpeedupCache{}} }

// Name implements Policy.
func (p *Pollux) Name() string { return "pollux" }

// SetEffort implements Budgeted: it sets Effort.
func (p *Pollux) SetEffort(effort float64) { p.Effort = effort }

// budget returns the population and generations for a round of jobs jobs.
func (p *Pollux) budget(jobs int) (pop, gens int) {
	effort := 1.0
	if p.Effort > 0 {
		effort = min(p.Effort, 1)
	}
	scale := math.Sqrt(min(1, defaultWork/float64(defaultPopulation*defaultGenerations*max(jobs, 1))) * effort)
	pop, gens = p.Population, p.Generations
	if pop <= 0 {
		pop = max(minPopulation, int(defaultPopulation*scale))
	}
	if gens <= 0 {
		gens = max(minGenerations, int(defaultGenerations*scale))
	}
	return pop, gens
}

func (p *Pollux) workers() int {
	if p.Workers > 0 {
		return p.Workers
	}
	return max(1, min(2, runtime.GOMAXPROCS(0)))
}

// Allocate implements Policy.
func (p *Pollux) Allocate(snap *Snapshot, prev *State) (Result, error) {
	obj, err := newObjective(snap, p.PowerMean, p.Cache, p.MeasuredRestart)
	if err != nil {
		return Result{}, err
	}
	defer p.Cache.endRound()
	return p.search(obj, newProblem(obj), snap, prev), nil
}

// search runs one round's search over problem pr of objective obj (built
// from snap): the body of Allocate, which the autoscaling policy also runs
// on an extended cluster whose virtual nodes pr masks out.
func (p *Pollux) search(obj *Objective, pr *problem, snap *Snapshot, prev *State) Result {
	res := Result{Diagnostics: Diagnostics{CurrentFitness: obj.Fitness(obj.current)}}
	if pr.jobs == 0 {
		res.Placements = []Placement{}
		res.State = pr.state(nil)
		return res
	}
	popSize, gens := p.budget(pr.jobs)
	var best *indiv
	var final [][]Placement
	var evals int
	if p.hierarchical(pr) {
		best, final, evals, gens = p.allocateHier(pr, prev, snap.Seed)
	} else {
		var cl *climber
		best, final, evals, cl = evolve(pr, pr.adopt(prev, popSize), !p.PreviousOnly, popSize, gens, p.workers(), snap.Seed)
		if pr.anyPref {
			cl.prefer(best)
		}
	}
	res.Placements = make([]Placement, pr.jobs)
	for j, pl := range best.alloc {
		res.Placements[j] = slices.Clone(pl)
	}
	res.Diagnostics.Fitness = obj.Fitness(res.Placements)
	res.Diagnostics.Generations = gens
	res.Diagnostics.Evaluations = evals
	res.State = pr.state(final)
	return res
}

// evolve runs the genetic search on pr with nw workers: its seeds are the
// repaired current allocation and a hill-climbed copy of it (when
// withCurrent, or when there is no previous population) and the
// previous population prevPop (already mapped onto pr), the population
// is filled with their mutants and evolved popSize x gens, and the best
// few individuals of the last generation are climbed. It returns the best
// individual, the final population (the best first, at most popSize),
// the evaluations and the climber (loaded with nothing in particular).
func evolve(pr *problem, prevPop [][]Placement, withCurrent bool, popSize, gens, nw int, seed uint64) (*indiv, [][]Placement, int, *climber) {
	workers := make([]*worker, nw)
	for i := range workers {
		workers[i] = pr.newWorker()
	}
	w0 := workers[0]
	evals := 0

	// Seeds: the repaired current allocation, a hill-climbed copy of it,
	// and the previous population.
	w0.reseed(seed, 0, 0)
	cl := pr.newClimber()
	var seeds []*indiv
	if withCurrent || len(prevPop) == 0 {
		base := pr.newIndiv()
		copy(base.alloc, pr.obj.current)
		w0.clearTouched()
		w0.repair(base)
		pr.evaluate(base)
		climbed := pr.newIndiv()
		climbed.copyFrom(base)
		cl.improve(climbed)
		seeds = append(seeds, base, climbed)
	}
	for _, alloc := range prevPop {
		ind := pr.newIndiv()
		copy(ind.alloc, alloc)
		w0.clearTouched()
		w0.repair(ind)
		pr.evaluate(ind)
		seeds = append(seeds, ind)
	}
	evals += len(seeds)
	pop := make([]*indiv, 0, 2*popSize)
	pop = append(pop, seeds[:min(len(seeds), popSize)]...)
	// Fill the population with mutants of the seeds.
	for i := 0; len(pop) < popSize; i++ {
		ind := pr.newIndiv()
		ind.copyFrom(seeds[i%len(seeds)])
		w0.reseed(seed, 0, uint64(i+1))
		w0.clearTouched()
		w0.mutate(ind)
		w0.repair(ind)
		pr.reevaluate(ind, w0.touched)
		pop = append(pop, ind)
		evals++
	}
	sortPop(pop)

	children := make([]*indiv, popSize)
	spare := make([]*indiv, 0, popSize)
	for g := 0; g < gens; g++ {
		for i := range children {
			if n := len(spare); n > 0 {
				children[i], spare = spare[n-1], spare[:n-1]
			} else {
				children[i] = pr.newIndiv()
			}
		}
		if nw == 1 {
			for c := range children {
				pr.child(w0, pop, children[c], seed, uint64(g+1), uint64(c))
			}
		} else {
			var wg sync.WaitGroup
			for wi, w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for c := wi; c < popSize; c += nw {
						pr.child(w, pop, children[c], seed, uint64(g+1), uint64(c))
					}
				}()
			}
			wg.Wait()
		}
		evals += popSize
		pop, spare = survive(append(pop, children...), popSize, spare[:0])
	}

	// Climb from the best few individuals; keep the best result.
	best := pr.newIndiv()
	best.copyFrom(pop[0])
	cl.improve(best)
	cand := pr.newIndiv()
	for _, ind := range pop[1:min(len(pop), finalClimbs)] {
		cand.copyFrom(ind)
		cl.improve(cand)
		evals++
		if cand.fit > best.fit {
			best, cand = cand, best
		}
	}
	final := make([][]Placement, 0, len(pop)+1)
	final = append(final, best.alloc)
	for _, ind := range pop {
		final = append(final, ind.alloc)
	}
	return best, final[:min(len(final), popSize)], evals, cl
}

// child builds one child: two tournament-picked parents, single-point
// crossover over the jobs in job order, mutation, repair, evaluation. Its
// random stream depends only on (seed, gen, idx).
func (pr *problem) child(w *worker, pop []*indiv, out *indiv, seed, gen, idx uint64) {
	w.reseed(seed, gen, idx)
	a, b := w.tournament(pop), w.tournament(pop)
	pt := w.rng.IntN(pr.jobs)
	for pos, j := range pr.order {
		src := b
		if pos < pt {
			src = a
		}
		out.alloc[j] = src.alloc[j]
		out.terms[j] = src.terms[j]
	}
	w.clearTouched()
	w.mutate(out)
	w.repair(out)
	pr.reevaluate(out, w.touched)
}

// tournament picks the fitter of two random individuals.
func (w *worker) tournament(pop []*indiv) *indiv {
	a, b := pop[w.rng.IntN(len(pop))], pop[w.rng.IntN(len(pop))]
	if b.fit > a.fit {
		return b
	}
	return a
}

// sortPop orders individuals by fitness, best first (stable).
func sortPop(pop []*indiv) {
	slices.SortStableFunc(pop, func(a, b *indiv) int {
		switch {
		case a.fit > b.fit:
			return -1
		case a.fit < b.fit:
			return 1
		}
		return 0
	})
}

// survive keeps the best size individuals of all, skipping exact fitness
// duplicates while there are enough distinct ones; the rest go to spare.
func survive(all []*indiv, size int, spare []*indiv) (pop, rest []*indiv) {
	sortPop(all)
	pop = make([]*indiv, 0, 2*size)
	dups := make([]*indiv, 0, len(all))
	for _, ind := range all {
		if len(pop) < size && (len(pop) == 0 || ind.fit != pop[len(pop)-1].fit) {
			pop = append(pop, ind)
		} else {
			dups = append(dups, ind)
		}
	}
	i := 0
	for ; len(pop) < size && i < len(dups); i++ {
		pop = append(pop, dups[i])
	}
	sortPop(pop)
	return pop, append(spare, dups[i:]...)
}

// adopt maps the previous round's population onto this round's jobs and
// nodes (by ID): vanished jobs and nodes are dropped, new jobs start with
// no GPUs. At most limit individuals.
func (pr *problem) adopt(prev *State, limit int) [][]Placement {
	if prev == nil || len(prev.Population) == 0 {
		return nil
	}
	snap := pr.obj.snap
	jobIdx := make(map[string]int, pr.jobs)
	for j := range snap.Jobs {
		jobIdx[snap.Jobs[j].ID] = j
	}
	nodeIdx := make(map[string]int, pr.nodes)
	for n := range snap.Nodes {
		nodeIdx[snap.Nodes[n].ID] = n
	}
	nodeMap := make([]int, len(prev.NodeIDs))
	for i, id := range prev.NodeIDs {
		if n, ok := nodeIdx[id]; ok {
			nodeMap[i] = n
		} else {
			nodeMap[i] = -1
		}
	}
	var out [][]Placement
	for _, old := range prev.Population {
		if len(out) == limit {
			break
		}
		alloc := make([]Placement, pr.jobs)
		for i, pl := range old {
			if i >= len(prev.JobIDs) {
				break
			}
			j, ok := jobIdx[prev.JobIDs[i]]
			if !ok {
				continue
			}
			var npl Placement
			for _, nc := range pl {
				if nc.Node < 0 || nc.Node >= len(nodeMap) || nodeMap[nc.Node] < 0 || nc.Count <= 0 {
					continue
				}
				npl = append(npl, NodeCount{Node: nodeMap[nc.Node], Count: nc.Count})
			}
			alloc[j] = normalize(npl)
		}
		out = append(out, alloc)
	}
	return out
}

// state packages a population for the next round.
func (pr *problem) state(pop [][]Placement) *State {
	snap := pr.obj.snap
	st := &State{JobIDs: make([]string, pr.jobs), NodeIDs: make([]string, pr.nodes), Population: pop}
	for j := range snap.Jobs {
		st.JobIDs[j] = snap.Jobs[j].ID
	}
	for n := range snap.Nodes {
		st.NodeIDs[n] = snap.Nodes[n].ID
	}
	return st
}
