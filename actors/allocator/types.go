package allocator

import (
	"maps"
	"math"
	"slices"

	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// A job's bid carries a model per GPU type it has run on (state.TypeBid).
// On a cluster of several types the round gives type-aware policies those
// models (optimizer.Job.TypeModels) and projects a type without one from
// the job's modelled type, its goodput scaled by the ratio of the types'
// one-GPU throughputs (optimizer.Job.TypeThroughput): per type, the median
// ratio over the jobs with a model on both it and a reference type (Sia
// profiles every job on every type; a live job has not). Until a job has
// run on both, the types count as equally fast.

// typeModels are a bid's models per GPU type among types, and the most
// replicas each was profiled at. The top-level model of a bid is its
// best-known type's: one of its parts, unless that type is the untyped
// one (a job measured on untyped nodes only or most, or a bid made before
// bids had parts), and then it is the untyped nodes' model.
func typeModels(bid *state.Bid, l goodput.Limits, types []string) (map[string]*goodput.Model, map[string]int) {
	models, reps := map[string]*goodput.Model{}, map[string]int{}
	for _, t := range types {
		if md := bid.TypeModel(t, l); md != nil {
			models[t], reps[t] = md, bid.OnType(t).MostProfiled
		}
	}
	untyped := !slices.ContainsFunc(bid.Types, func(tb state.TypeBid) bool { return tb.Params == bid.Params })
	if untyped && slices.Contains(types, "") {
		if md := bid.Model(l); md != nil {
			models[""], reps[""] = md, bid.MostProfiled
		}
	}
	if len(models) == 0 {
		// Only models of types no node has now: project from the
		// best-known one, on every type alike.
		if md := bid.Model(l); md != nil {
			for _, t := range types {
				models[t], reps[t] = md, bid.MostProfiled
			}
		}
	}
	return models, reps
}

// oneGPU is a model's throughput on one GPU at the job's initial batch
// (within its local batch range): what types are compared by.
func oneGPU(p goodput.Params, l goodput.Limits) float64 {
	m := float64(min(max(l.InitBatch, l.MinLocal), max(l.MaxLocal, l.MinLocal)))
	return p.Throughput(1, 1, m, 0)
}

// typeSpeeds estimates the GPU types' relative speeds from every live
// job's bid (bids overriding the replicated ones): the reference type
// (the one most jobs have a model on, then the first by name) has speed
// 1, another type the median over the jobs with a model on both of their
// one-GPU throughput there over the reference's. Types no job relates to
// the reference are absent.
func typeSpeeds(st *state.State, bids map[string]*state.Bid, types []string) map[string]float64 {
	thr := map[string]map[string]float64{} // job -> type -> one-GPU throughput
	jobsOn := map[string]int{}
	for _, id := range st.JobIDs() {
		j := st.Jobs[id]
		if j.State.Terminal() {
			continue
		}
		bid := roundBid(j, bids)
		for _, t := range types {
			if tb := bid.OnType(t); tb != nil && bid.HasModel {
				if v := oneGPU(tb.Params, j.Spec.Limits); v > 0 && !math.IsInf(v, 0) {
					if thr[id] == nil {
						thr[id] = map[string]float64{}
					}
					thr[id][t] = v
					jobsOn[t]++
				}
			}
		}
	}
	ref, refN := "", 0
	for _, t := range types {
		if jobsOn[t] > refN {
			ref, refN = t, jobsOn[t]
		}
	}
	if refN == 0 {
		return nil
	}
	speeds := map[string]float64{ref: 1}
	for _, t := range types {
		if t == ref {
			continue
		}
		var ratios []float64
		for _, id := range slices.Sorted(maps.Keys(thr)) {
			if a, b := thr[id][t], thr[id][ref]; a > 0 && b > 0 {
				ratios = append(ratios, a/b)
			}
		}
		if len(ratios) > 0 {
			speeds[t] = median(ratios)
		}
	}
	return speeds
}

func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// roundBid is the job's bid as a round sees it: the one its actor sent
// this round (bids) over the replicated one.
func roundBid(j *state.Job, bids map[string]*state.Bid) *state.Bid {
	if b := bids[j.ID]; b != nil {
		return b
	}
	return &j.Bid
}
