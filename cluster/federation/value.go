package federation

import (
	"sort"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// Demand is what GPUs are worth to one job: Speedup(k) is its goodput on
// k GPUs over its goodput on one GPU (the scale every lab's bid shares),
// for k from 1 to Max.
type Demand struct {
	Max     int
	Speedup func(k int) float64
}

// DemandOf is the demand of a job as the allocator sees it, on nodes of
// gpusPerNode GPUs (k GPUs span ceil(k / gpusPerNode) nodes): from its
// goodput model, or linear (every GPU worth one) while it has none, as
// Pollux treats a job it knows nothing about yet.
func DemandOf(j optimizer.Job, gpusPerNode int) Demand {
	d := Demand{Max: max(j.MaxReplicas, 0), Speedup: func(k int) float64 { return float64(k) }}
	if j.Model == nil || gpusPerNode < 1 {
		return d
	}
	sp, err := goodput.NewSpeedup(*j.Model, 1, 1)
	if err != nil {
		return d
	}
	d.Speedup = func(k int) float64 { return sp.At((k+gpusPerNode-1)/gpusPerNode, k) }
	return d
}

// Curve is a lab's bid: out[g] is what its (g+1)-th GPU is worth to its
// jobs, in units of one GPU's worth of a job's own goodput, for at most
// limit GPUs. Each job's speedup is replaced by its upper concave hull
// (so a job is valued by the best average gain of the GPUs it would get),
// and the jobs' marginal gains are merged, largest first: out is the
// value of the best split of g GPUs among the jobs, GPU by GPU, and never
// increases.
func Curve(ds []Demand, limit int) []float64 {
	var out []float64
	for _, d := range ds {
		out = append(out, marginals(d)...)
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(out)))
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// marginals are the slopes of the upper concave hull of a job's speedup
// from 0 GPUs up to its best count, one per GPU (zero and negative gains
// dropped: a job is never worth GPUs that slow it down).
func marginals(d Demand) []float64 {
	if d.Max < 1 || d.Speedup == nil {
		return nil
	}
	type pt struct {
		k int
		s float64
	}
	hull := []pt{{0, 0}}
	for k := 1; k <= d.Max; k++ {
		s := d.Speedup(k)
		if !(s > 0) {
			continue
		}
		p := pt{k, s}
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			// Drop b when it lies on or below the segment from a to p.
			if (b.s-a.s)*float64(p.k-a.k) <= (p.s-a.s)*float64(b.k-a.k) {
				hull = hull[:len(hull)-1]
				continue
			}
			break
		}
		hull = append(hull, p)
	}
	var out []float64
	for i := 1; i < len(hull); i++ {
		slope := (hull[i].s - hull[i-1].s) / float64(hull[i].k-hull[i-1].k)
		if !(slope > 0) {
			break
		}
		for k := hull[i-1].k; k < hull[i].k; k++ {
			out = append(out, slope)
		}
	}
	return out
}
