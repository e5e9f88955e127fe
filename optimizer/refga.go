package optimizer

import (
	"math/rand/v2"
	"slices"
	"sync"
)

// RefGA is the reference-shaped search, kept to measure our search
// against: the Python artifact's genetic algorithm over dense jobs x
// nodes matrices, ranked by fitness alone. Its cost grows with jobs x
// nodes; use it for comparisons, not to schedule (docs/policies.md, "The
// baselines").
type RefGA struct {
	PowerMean   float64
	Population  int // 0 means 100
	Generations int // 0 means 100
	Workers     int // 0 means min(2, GOMAXPROCS)
}

// NewRefGA returns the reference-shaped search with p = -1, 100 x 100.
func NewRefGA() *RefGA { return &RefGA{PowerMean: DefaultPowerMean} }

// Name implements Policy.
func (r *RefGA) Name() string { return "reference-ga" }

// dense is one individual: counts[pos*nodes+n] is the count of the job at
// position pos of the job order on node n.
type dense struct {
	counts []int
	fit    float64
}

type denseProblem struct {
	obj   *Objective
	jobs  int
	nodes int
	base  []int // the current allocation, densely
	maxR  []int // max replicas by position
	minR  []int
}

// Allocate implements Policy.
func (r *RefGA) Allocate(snap *Snapshot, prev *State) (Result, error) {
	obj, err := NewObjective(snap, r.PowerMean)
	if err != nil {
		return Result{}, err
	}
	J, N := len(snap.Jobs), len(snap.Nodes)
	dp := &denseProblem{obj: obj, jobs: J, nodes: N, base: make([]int, J*N), maxR: make([]int, J), minR: make([]int, J)}
	for pos, j := range obj.order {
		for _, nc := range obj.current[j] {
			dp.base[pos*N+nc.Node] = nc.Count
		}
		dp.maxR[pos] = snap.Jobs[j].MaxReplicas
		dp.minR[pos] = snap.Jobs[j].MinReplicas
	}
	res := Result{Diagnostics: Diagnostics{CurrentFitness: obj.Fitness(obj.current)}}
	if J == 0 {
		res.Placements = []Placement{}
		return res, nil
	}
	popSize, gens := r.Population, r.Generations
	if popSize <= 0 {
		popSize = 100
	}
	if gens <= 0 {
		gens = 100
	}
	nw := r.Workers
	if nw <= 0 {
		nw = (&Pollux{}).workers()
	}
	first := &dense{counts: slices.Clone(dp.base)}
	dp.evaluate(first)
	pop := []*dense{first}
	evals := 1
	rngs := make([]*rand.Rand, nw)
	pcgs := make([]*rand.PCG, nw)
	for i := range rngs {
		pcgs[i] = rand.NewPCG(0, 0)
		rngs[i] = rand.New(pcgs[i])
	}
	for g := 0; g < gens; g++ {
		kids := make([]*dense, popSize)
		var wg sync.WaitGroup
		for wi := range nw {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rngs[wi]
				for m := wi; 2*m < popSize; m += nw {
					pcgs[wi].Seed(snap.Seed^0xd1b54a32d192ed03, uint64(g)<<32|uint64(m))
					a, b := dp.tournament(rng, pop), dp.tournament(rng, pop)
					k1, k2 := dp.crossover(rng, a, b)
					for i, k := range []*dense{k1, k2} {
						if 2*m+i >= popSize {
							break
						}
						dp.mutate(rng, k)
						dp.repair(rng, k)
						dp.evaluate(k)
						kids[2*m+i] = k
					}
				}
			}()
		}
		wg.Wait()
		evals += popSize
		pop = dp.survive(append(pop, kids...), popSize)
	}
	best := pop[0]
	res.Placements = make([]Placement, J)
	for pos, j := range obj.order {
		row := best.counts[pos*N : (pos+1)*N]
		for n, c := range row {
			if c > 0 {
				res.Placements[j] = append(res.Placements[j], NodeCount{Node: n, Count: c})
			}
		}
	}
	res.Diagnostics.Fitness = obj.Fitness(res.Placements)
	res.Diagnostics.Generations = gens
	res.Diagnostics.Evaluations = evals
	return res, nil
}

func (dp *denseProblem) evaluate(d *dense) {
	N := dp.nodes
	sum := 0.0
	for pos, j := range dp.obj.order {
		row := d.counts[pos*N : (pos+1)*N]
		brow := dp.base[pos*N : (pos+1)*N]
		n, k := 0, 0
		same := true
		for i, c := range row {
			if c > 0 {
				n++
				k += c
			}
			if c != brow[i] {
				same = false
			}
		}
		x := dp.obj.speed[j].at(n, k) * dp.obj.scale
		if !same {
			x *= dp.obj.factor[j]
		}
		sum += dp.obj.termOf(x)
	}
	d.fit = dp.obj.fromSum(sum)
}

func (dp *denseProblem) tournament(rng *rand.Rand, pop []*dense) *dense {
	a, b := pop[rng.IntN(len(pop))], pop[rng.IntN(len(pop))]
	if b.fit > a.fit {
		return b
	}
	return a
}

// crossover swaps the rows of the jobs before a random point.
func (dp *denseProblem) crossover(rng *rand.Rand, a, b *dense) (*dense, *dense) {
	cut := rng.IntN(dp.jobs) * dp.nodes
	k1 := &dense{counts: make([]int, len(a.counts))}
	k2 := &dense{counts: make([]int, len(a.counts))}
	copy(k1.counts[:cut], b.counts[:cut])
	copy(k1.counts[cut:], a.counts[cut:])
	copy(k2.counts[:cut], a.counts[:cut])
	copy(k2.counts[cut:], b.counts[cut:])
	return k1, k2
}

// mutate applies the artifact's three mutations cell by cell.
func (dp *denseProblem) mutate(rng *rand.Rand, d *dense) {
	J, N := dp.jobs, dp.nodes
	c := d.counts
	for pos := range J {
		if rng.Float64() < resetRate {
			copy(c[pos*N:(pos+1)*N], dp.base[pos*N:(pos+1)*N])
		}
	}
	for pos := range J {
		if rng.Float64() < zeroJobRate {
			for n := range N {
				if rng.Float64() < zeroCellRate {
					c[pos*N+n] = 0
				}
			}
		} else {
			for range N {
				rng.Float64() // the artifact draws for every cell
			}
		}
	}
	free := make([]int, N)
	for n := range N {
		free[n] = dp.obj.capacity[n]
	}
	for i, v := range c {
		free[i%N] -= v
	}
	nFree := 0
	for _, f := range free {
		if f >= 1 {
			nFree++
		}
	}
	p1 := 0.0
	if nFree > 0 {
		p1 = 1 / float64(nFree)
	}
	for pos := range J {
		row := c[pos*N : (pos+1)*N]
		nOwn := 0
		for n, v := range row {
			if v > 0 && free[n] >= 1 {
				nOwn++
			}
		}
		for n := range row {
			p := 0.0
			if free[n] >= 1 {
				p = p1
				if row[n] > 0 {
					p2 := 1 / float64(nOwn)
					p = p1 + p2 - p1*p2
				}
			}
			if rng.Float64() < p {
				row[n] += rng.IntN(max(dp.obj.capacity[n]-row[n], 0) + 1)
			}
		}
	}
}

// repair applies the artifact's four repairs on the dense matrix.
func (dp *denseProblem) repair(rng *rand.Rand, d *dense) {
	J, N := dp.jobs, dp.nodes
	c := d.counts
	// One distributed job per node, the first in job order.
	taken := make([]bool, N)
	for pos := range J {
		row := c[pos*N : (pos+1)*N]
		nz := 0
		for _, v := range row {
			if v > 0 {
				nz++
			}
		}
		if nz <= 1 {
			continue
		}
		for n, v := range row {
			if v > 0 {
				if taken[n] {
					row[n] = 0
				} else {
					taken[n] = true
				}
			}
		}
	}
	// Max replicas and MaxJobNodes nodes, nodes visited in random order.
	perm := make([]int, N)
	for pos := range J {
		row := c[pos*N : (pos+1)*N]
		for i := range perm {
			perm[i] = i
		}
		rng.Shuffle(N, func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		left, used := dp.maxR[pos], 0
		for _, n := range perm {
			v := min(row[n], left)
			if v > 0 && used == MaxJobNodes {
				v = 0
			}
			if v > 0 {
				used++
			}
			left -= v
			row[n] = v
		}
	}
	// Capacity in job order.
	free := slices.Clone(dp.obj.capacity)
	for pos := range J {
		row := c[pos*N : (pos+1)*N]
		for n, v := range row {
			v = min(v, max(free[n], 0))
			row[n] = v
			free[n] -= v
		}
	}
	// min_replicas or nothing.
	for pos := range J {
		row := c[pos*N : (pos+1)*N]
		k := 0
		for _, v := range row {
			k += v
		}
		if k < dp.minR[pos] {
			clear(row)
		}
	}
}

// survive keeps the best size individuals, fitness duplicates last.
func (dp *denseProblem) survive(all []*dense, size int) []*dense {
	slices.SortStableFunc(all, func(a, b *dense) int {
		switch {
		case a.fit > b.fit:
			return -1
		case a.fit < b.fit:
			return 1
		}
		return 0
	})
	out := make([]*dense, 0, size)
	var dups []*dense
	for _, d := range all {
		if len(out) < size && (len(out) == 0 || d.fit != out[len(out)-1].fit) {
			out = append(out, d)
		} else {
			dups = append(dups, d)
		}
	}
	for i := 0; len(out) < size && i < len(dups); i++ {
		out = append(out, dups[i])
	}
	return out
}
