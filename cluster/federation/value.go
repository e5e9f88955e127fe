package federation

import (
	"math"
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

// epsilon is what Pollux's objective adds to every job's speedup, so that
// a job without GPUs counts (and its first GPU is worth the most).
const epsilon = 1e-3

// utility is a job's contribution to the power mean with exponent p of
// speedups (speedup + epsilon, as Pollux's objective), shifted so that no
// GPUs is worth 0: ((s + e)^p - e^p) / p, or log((s + e) / e) for p = 0.
// p = 1 counts the speedup itself (utilitarian); p = -1, Pollux's default,
// makes a job's first GPUs worth much more than its tenth.
func utility(s, p float64) float64 {
	if p == 0 {
		return math.Log((s + epsilon) / epsilon)
	}
	return (math.Pow(s+epsilon, p) - math.Pow(epsilon, p)) / p
}

// Curve is a lab's bid: out[g] is what its (g+1)-th GPU adds to the
// power mean with exponent p of its jobs' speedups (each over the job's
// own one-GPU goodput: the scale every lab shares), for at most limit
// GPUs. Each job's utility is replaced by its upper concave hull (a job
// is valued by the best average gain of the GPUs it would get), and the
// jobs' marginal gains are merged, largest first: out is the value of the
// best split of g GPUs among the jobs, GPU by GPU, and never increases.
func Curve(ds []Demand, p float64, limit int) []float64 {
	var out []float64
	for _, d := range ds {
		out = append(out, marginals(d, p)...)
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(out)))
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// marginals are the slopes of the upper concave hull of a job's utility
// from 0 GPUs up to its best count, one per GPU (zero and negative gains
// dropped: a job is never worth GPUs that slow it down).
func marginals(d Demand, p float64) []float64 {
	if d.Max < 1 || d.Speedup == nil {
		return nil
	}
	type pt struct {
		k int
		s float64
	}
	hull := []pt{{0, 0}}
	for k := 1; k <= d.Max; k++ {
		sp := d.Speedup(k)
		if !(sp > 0) || math.IsInf(sp, 0) {
			continue
		}
		q := pt{k, utility(sp, p)}
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			// Drop b when it lies on or below the segment from a to q.
			if (b.s-a.s)*float64(q.k-a.k) <= (q.s-a.s)*float64(b.k-a.k) {
				hull = hull[:len(hull)-1]
				continue
			}
			break
		}
		hull = append(hull, q)
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
