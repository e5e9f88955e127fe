package trace

import (
	"sort"

	"pollux/optimizer/goodput"
	"pollux/testbed"
)

// StepTimes implements testbed.Application as the artifacts interpolate:
// linearly in m on a measured placement, otherwise piecewise-linearly over
// the Delaunay tetrahedralisation of the measured (N, K, m) points (N
// capped at 16), and outside their hull linearly in m, then K, then N
// (fallback). Outside the measured range of m the nearest one holds.
func (a *App) StepTimes(placement []int, m float64) (step, sync float64) {
	norm := testbed.NormalizePlacement(placement)
	if len(norm) == 0 {
		return 0, 0
	}
	if c, ok := a.placements[testbed.PlacementKey(norm)]; ok {
		return c.at(m)
	}
	n, k := min(len(norm), maxInterpNodes), testbed.Replicas(norm)
	if step, sync, ok := a.hull.at([3]float64{float64(n), float64(k), m}); ok {
		return step, sync
	}
	return a.fallback(len(norm), k, m)
}

// maxInterpNodes caps the node count of an interpolated placement (the
// artifacts' cap).
const maxInterpNodes = 16

// fallback interpolates over (N, K/N, m) across every measured point:
// linearly in m on each measured (N, K), then linearly in K at the
// bracketing measured node counts (at the same replicas-per-node ratio),
// then linearly in N. N is capped at the largest measured node count.
func (a *App) fallback(n, k int, m float64) (step, sync float64) {
	ratio := float64(k) / float64(n)
	nodes := a.gridNodes
	if n > nodes[len(nodes)-1] {
		n = nodes[len(nodes)-1]
	}
	lo, hi, w := bracket(nodes, float64(n))
	s0, y0 := a.atNodes(nodes[lo], ratio*float64(nodes[lo]), m)
	if w == 0 {
		return s0, y0
	}
	s1, y1 := a.atNodes(nodes[hi], ratio*float64(nodes[hi]), m)
	return s0 + w*(s1-s0), y0 + w*(y1-y0)
}

// atNodes interpolates linearly in K among the measured replica counts on
// n nodes.
func (a *App) atNodes(n int, k, m float64) (step, sync float64) {
	ks := a.gridReplicas[n]
	lo, hi, w := bracket(ks, k)
	s0, y0 := a.grid[[2]int{n, ks[lo]}].at(m)
	if w == 0 {
		return s0, y0
	}
	s1, y1 := a.grid[[2]int{n, ks[hi]}].at(m)
	return s0 + w*(s1-s0), y0 + w*(y1-y0)
}

// bracket finds the sorted xs around x: indexes lo <= hi and the weight of
// hi. Outside the range it clamps (weight 0 on the nearest end).
func bracket(xs []int, x float64) (lo, hi int, w float64) {
	i := sort.Search(len(xs), func(i int) bool { return float64(xs[i]) >= x })
	switch {
	case i == 0:
		return 0, 0, 0
	case i == len(xs):
		return len(xs) - 1, len(xs) - 1, 0
	case float64(xs[i]) == x:
		return i, i, 0
	}
	return i - 1, i, (x - float64(xs[i-1])) / float64(xs[i]-xs[i-1])
}

// batchBracket finds the validations around a total batch (clamped).
func (a *App) batchBracket(batch float64) (lo, hi *validation, w float64) {
	vs := a.stats.validations
	i := sort.Search(len(vs), func(i int) bool { return vs[i].batch >= batch })
	switch {
	case i == 0:
		return &vs[0], &vs[0], 0
	case i == len(vs):
		return &vs[len(vs)-1], &vs[len(vs)-1], 0
	case vs[i].batch == batch:
		return &vs[i], &vs[i], 0
	}
	return &vs[i-1], &vs[i], (batch - vs[i-1].batch) / (vs[i].batch - vs[i-1].batch)
}

func row(xs []float64, i int) float64 {
	if i < 0 {
		i = 0
	}
	if i >= len(xs) {
		i = len(xs) - 1
	}
	return xs[i]
}

// GradStats implements testbed.Application: the statistics of row epoch,
// interpolated linearly between the two nearest measured batch sizes
// (clamped outside them).
func (a *App) GradStats(batch float64, epoch int) goodput.GradStats {
	lo, hi, w := a.batchBracket(batch)
	sqr0, var0 := row(lo.gradSqr, epoch), row(lo.gradVar, epoch)
	sqr1, var1 := row(hi.gradSqr, epoch), row(hi.gradVar, epoch)
	return goodput.GradStats{GradSqr: sqr0 + w*(sqr1-sqr0), GradVar: var0 + w*(var1-var0)}
}

// Iterations implements testbed.Application from the iteration column,
// interpolated linearly in the batch size.
func (a *App) Iterations(batch float64, e int) float64 {
	if e <= 0 {
		return 0
	}
	lo, hi, w := a.batchBracket(batch)
	i0, i1 := row(lo.iteration, e-1), row(hi.iteration, e-1)
	return i0 + w*(i1-i0)
}
