package optimizer

import (
	"fmt"
	"math"
	"slices"
)

// maxLagrangianSizes bounds the sizes pollux-het evaluates when its
// rounds are too large for the exact solver (each size then costs a
// Lagrangian relaxation of its own).
const maxLagrangianSizes = 16

// hetSized is the round solved within the first n nodes of the template
// type.
type hetSized struct {
	size  int // nodes the placements need: the other types' and the template's up to the last used
	sol   choiceSolution
	alloc []Placement
	want  []hetOption
}

// checkSizing implements Sizer: the template must name the GPU type of
// the nodes a scale-up adds.
func (h *HetPollux) checkSizing(s Autoscale) error {
	if s.Template.Type == "" {
		return fmt.Errorf("%w: the node template has no GPU type: on a cluster of several types the nodes a scale-up adds must have one", ErrBadAutoscale)
	}
	return h.checkSettings()
}

// sizes implements Sizer: a size is the real nodes of the other types
// plus a number of nodes of the template's type (the real ones first,
// then virtual copies up to MaxNodes in all), and each is solved as
// pollux-het's round within the first nodes of the template type, valued
// with the real cluster's normalisation (docs/policies.md).
func (h *HetPollux) sizes(snap *Snapshot, _ *State, s Autoscale) ([]SizePoint, func(int) Result, error) {
	nOther, nTmpl := 0, 0
	for _, n := range snap.Nodes {
		if n.Type == s.Template.Type {
			nTmpl++
		} else {
			nOther++
		}
	}
	hi := max(nTmpl, s.MaxNodes-nOther)
	lo := max(s.MinNodes-nOther, 0)
	if nOther == 0 {
		lo = max(lo, 1)
	}
	ext, err := extend(snap, s.Template, nOther+hi)
	if err != nil {
		return nil, nil, err
	}
	tp, err := check(ext)
	if err != nil {
		return nil, nil, err
	}
	types := roundTypes(ext)
	tt := slices.IndexFunc(types, func(ti typeInfo) bool { return ti.name == s.Template.Type })
	if tt < 0 {
		// No node of the template's type, even virtual: MaxNodes is
		// taken by the other types. Only the real cluster remains.
		types = append(types, typeInfo{name: s.Template.Type, gpusPerNode: s.Template.GPUs})
		tt = len(types) - 1
	}
	// The real cluster's normalisation (its types come first in ext's),
	// or the largest cluster's when there is no real GPU.
	norm := newHetNorm(snap, roundTypes(snap))
	if snap.TotalGPUs() == 0 {
		norm = newHetNorm(ext, types)
	}
	items := make([]choiceItem, len(ext.Jobs))
	goodputs := make([]*jobGoodput, len(ext.Jobs))
	for j := range ext.Jobs {
		items[j], goodputs[j] = h.jobItem(ext, &ext.Jobs[j], types, norm)
		capRequired(ext, tp, types, j, &items[j])
	}
	defer h.Cache.Sweep()

	caps := make([]int, len(types))
	states := 1.0
	for t, ti := range types {
		caps[t] = ti.total
		states *= float64(ti.total + 1)
	}
	exact := h.ExactStates
	if exact <= 0 {
		exact = defaultExactStates
	}
	// Every candidate number of template nodes, and always the real one;
	// fewer when each is solved on its own.
	most := maxSizeCandidates
	if states > float64(exact) {
		most = maxLagrangianSizes
	}
	counts := sizeCandidates(lo, hi, nTmpl, most)
	if !slices.Contains(counts, nTmpl) {
		counts = append(counts, nTmpl)
		slices.Sort(counts)
	}
	within := make([][]int, len(counts))
	for i, n := range counts {
		within[i] = slices.Clone(caps)
		within[i][tt] = 0
		for _, node := range types[tt].nodes[:n] {
			within[i][tt] += ext.Nodes[node].GPUs
		}
	}
	sols := solveChoicesWithin(items, caps, within, exact)
	rank := make(map[int]int, len(types[tt].nodes))
	for r, node := range types[tt].nodes {
		rank[node] = r
	}
	all := make([]*hetSized, len(counts))
	for i, n := range counts {
		sz := &hetSized{sol: sols[i], alloc: make([]Placement, len(ext.Jobs)), want: make([]hetOption, len(ext.Jobs))}
		for j, p := range sz.sol.pick {
			sz.want[j] = hetOption{typ: -1}
			if p >= 0 {
				o := items[j].opts[p]
				sz.want[j] = hetOption{typ: o.typ, k: o.size}
			}
		}
		for t := range types {
			ti := types[t]
			if t == tt {
				ti.nodes = ti.nodes[:n]
			}
			placeType(ext, tp, ti, t, sz.want, sz.alloc)
		}
		last := 0
		for _, pl := range sz.alloc {
			for _, nc := range pl {
				if r, ok := rank[nc.Node]; ok {
					last = max(last, r+1)
				}
			}
		}
		sz.size = nOther + last
		all[i] = sz
	}

	// The Pareto front of (size, fitness), by size.
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		a, b := all[x], all[y]
		if a.size != b.size {
			return a.size - b.size
		}
		switch {
		case a.sol.cost < b.sol.cost:
			return -1
		case a.sol.cost > b.sol.cost:
			return 1
		}
		return 0
	})
	var front []SizePoint
	var points []*hetSized
	for _, i := range order {
		sz := all[i]
		fit := h.fitnessOf(sz.sol.cost, len(ext.Jobs))
		if len(front) > 0 && fit <= front[len(front)-1].Fitness {
			continue // dominated: as fit or fitter with fewer nodes
		}
		front = append(front, SizePoint{Nodes: sz.size, Fitness: fit, Utility: hetUtility(ext, goodputs, sz)})
		points = append(points, sz)
	}
	result := func(chosen int) Result {
		res := Result{Placements: make([]Placement, len(snap.Jobs))}
		if chosen >= 0 {
			sz := points[chosen]
			copy(res.Placements, sz.alloc)
			res.Diagnostics.Objective, res.Diagnostics.Bound, res.Diagnostics.Exact = sz.sol.cost, sz.sol.bound, sz.sol.exact
			res.Diagnostics.Fitness = front[chosen].Fitness
		}
		return res
	}
	return front, result, nil
}

// fitnessOf turns a round's cost (the sum over jobs of their weighted
// power-mean terms) into the power mean it stands for, positive and
// higher for a better round, so that DesiredNodes can compare sizes.
func (h *HetPollux) fitnessOf(cost float64, jobs int) float64 {
	m := cost / float64(max(jobs, 1))
	switch p := h.PowerMean; {
	case p == 0:
		return math.Exp(-m)
	case p > 0:
		return math.Pow(math.Max(-m, 0), 1/p)
	default:
		return math.Pow(m, 1/p)
	}
}

// hetUtility is the artifact's utility of a solved size: every placed
// job's speedup over one GPU of the type it runs on, summed, over the
// GPUs of the nodes hosting at least one replica (0 when none does).
func hetUtility(snap *Snapshot, goodputs []*jobGoodput, sz *hetSized) float64 {
	used := map[int]bool{}
	sum := 0.0
	for j, pl := range sz.alloc {
		w := sz.want[j]
		if len(pl) == 0 || w.typ < 0 {
			continue
		}
		sum += goodputs[j].speedupOverOne(w.typ, w.k)
		for _, nc := range pl {
			used[nc.Node] = true
		}
	}
	gpus := 0
	for n := range used {
		gpus += snap.Nodes[n].GPUs
	}
	if gpus == 0 {
		return 0
	}
	return sum / float64(gpus)
}

// speedupOverOne is the job's goodput on k GPUs of type t over its goodput
// on one GPU of t; when one GPU holds no batch, over the fewest GPUs k0
// of t that do, counted linear up to there (k0 times the ratio).
func (g *jobGoodput) speedupOverOne(t, k int) float64 {
	v := g.at(t, k)
	if !(v > 0) {
		return 0
	}
	for k0 := 1; k0 <= k; k0++ {
		if b := g.at(t, k0); b > 0 {
			return float64(k0) * v / b
		}
	}
	return float64(k)
}
