package job

import (
	"math"

	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// maxAdaptiveReplicas caps an adaptive job's replicas (spec section 4).
const maxAdaptiveReplicas = 64

// replicaBound is how far the job may be scaled: at most double the most
// replicas it has been profiled at, within its spec, 64 and what its batch
// limits allow (never below its minimum).
func replicaBound(spec state.JobSpec, mostProfiled int) int {
	l := spec.Limits
	limit := min(spec.MaxReplicas, max(2*mostProfiled, 1), maxAdaptiveReplicas)
	if l.MinLocal > 0 {
		limit = min(limit, max(l.MaxBatch/l.MinLocal, 1))
	}
	return min(max(limit, spec.MinReplicas), state.MaxBidReplicas)
}

// choose is the batch configuration on k replicas over n nodes: the
// model's best if there is a model and a feasible configuration, else the
// initial batch split over the replicas (the scheduler's default before
// anything is measured), kept within the job's limits.
func choose(model *goodput.Model, l goodput.Limits, grad goodput.GradStats, n, k int) state.BatchChoice {
	if model != nil {
		if cfg, err := model.Optimize(n, k); err == nil {
			return state.BatchChoice{LocalBatch: cfg.LocalBatch, AccumSteps: cfg.AccumSteps, Gain: cfg.Gain}
		}
	}
	total := math.Min(math.Max(float64(l.InitBatch), float64(l.MinLocal*k)), float64(max(l.MaxBatch, l.InitBatch)))
	m, s := l.Split(k, total)
	m = min(max(m, l.MinLocal), l.MaxLocal)
	if !l.Accumulation {
		s = 0
	}
	for s > 0 && k*m*(s+1) > max(l.MaxBatch, k*l.MinLocal) {
		s--
	}
	if k*m*(s+1) > max(l.MaxBatch, k*l.MinLocal) {
		m = max(l.MaxBatch/k, l.MinLocal)
	}
	return state.BatchChoice{LocalBatch: m, AccumSteps: s, Gain: grad.Gain(float64(k*m*(s+1)), float64(l.InitBatch))}
}

// tables are the batch configurations for 1..bound replicas on one node
// and on several (for one replica, "several nodes" is the one-node
// choice: the shape cannot occur).
func tables(model *goodput.Model, l goodput.Limits, grad goodput.GradStats, bound int) (single, multi []state.BatchChoice) {
	single = make([]state.BatchChoice, bound)
	multi = make([]state.BatchChoice, bound)
	for k := 1; k <= bound; k++ {
		single[k-1] = choose(model, l, grad, 1, k)
		if k == 1 {
			multi[0] = single[0]
		} else {
			multi[k-1] = choose(model, l, grad, 2, k)
		}
	}
	return single, multi
}
