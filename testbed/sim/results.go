package sim

import (
	"context"
	"math"

	"pollux/testbed"
)

// sample records the cluster after a round.
func (s *state) sample() Sample {
	sm := Sample{Time: s.now}
	running := 0
	for _, j := range s.jobs {
		if !j.done && j.spec.Time <= s.now {
			sm.Active++
		}
		if !j.done && j.running() {
			sm.GPUs += j.replicas
			sm.MeanBatch += float64(j.totalBatch())
			if s.cloud != nil {
				b := float64(j.totalBatch())
				sm.Efficiency += j.app.GradStats(b, j.epoch).Efficiency(b, float64(j.limits.InitBatch))
			}
			running++
		}
	}
	if running > 0 {
		sm.MeanBatch /= float64(running)
		sm.Efficiency /= float64(running)
	}
	if s.cloud != nil {
		sm.Nodes = s.provisioned()
	}
	return sm
}

// results builds the per-job records, in workload order, with each job's
// finish-time fairness (see polluxFTF and siaFTF).
func (s *state) results(ctx context.Context, timeline []Sample) ([]JobResult, error) {
	out := make([]JobResult, len(s.jobs))
	for _, j := range s.jobs {
		out[j.index] = JobResult{
			Name:                j.spec.Name,
			App:                 j.spec.App,
			Submit:              j.spec.Time,
			Completion:          j.completion,
			JCT:                 j.completion - j.spec.Time,
			Restarts:            max(j.restarts, 0),
			GPUSeconds:          j.attained,
			AllocatedGPUSeconds: j.allocated,
			CrossRackGPUSeconds: j.crossAllocated,
			GPUType:             j.typ,
			Fits:                j.fits,
		}
		if p := j.profiles[j.typ]; p != nil && p.params != nil {
			out[j.index].FittedCrossRack = p.params.AlphaX
		}
		if j.trueCrossTime > 0 {
			out[j.index].TrueCrossRack = j.trueCross / j.trueCrossTime
		}
	}
	if s.cfg.isolated || s.cfg.NoFairness || s.cfg.Cloud != nil {
		return out, nil
	}
	if s.cfg.Semantics == SiaSemantics {
		for _, j := range s.jobs {
			ftf, err := s.siaFTF(ctx, j)
			if err != nil {
				return nil, err
			}
			out[j.index].FTF = ftf
		}
		return out, nil
	}
	s.polluxFTF(out, timeline)
	return out, nil
}

// polluxFTF sets Themis's finish-time fairness: the job's fair share is
// the cluster divided by the mean number of jobs it contended with, and
// its time alone there is the best the traces allow (isolatedTime).
func (s *state) polluxFTF(out []JobResult, timeline []Sample) {
	gpus := s.cfg.TotalGPUs()
	perNode := s.cfg.groups()[0].GPUsPerNode
	iso := map[[2]any]float64{}
	for _, j := range s.jobs {
		r := &out[j.index]
		sum, cnt := 0.0, 0
		for _, sm := range timeline {
			if sm.Time > j.spec.Time && sm.Time <= j.completion+s.cfg.Interval {
				sum += float64(sm.Active)
				cnt++
			}
		}
		contention := 1.0
		if cnt > 0 {
			contention = math.Max(sum/float64(cnt), 1)
		}
		k := max(int(float64(gpus)/contention), 1)
		k = min(k, 64, max(j.limits.MaxBatch/j.limits.MinLocal, 1))
		if _, ok := pinnedApps[j.spec.App]; ok {
			k = 1
		}
		key := [2]any{j.spec.App, k}
		t, ok := iso[key]
		if !ok {
			t = isolatedTime(j.app, k, perNode) + s.cfg.Restart
			iso[key] = t
		}
		if t > 0 {
			r.FTF = r.JCT / t
		}
	}
}

// isolatedTime is how long a job of app takes alone on k GPUs packed onto
// full nodes, choosing in every epoch the total batch (among the candidates
// of the per-job search) with the best true goodput.
func isolatedTime(app testbed.Application, k, perNode int) float64 {
	l := app.Limits()
	var placement []int
	for left := k; left > 0; left -= perNode {
		placement = append(placement, min(left, perNode))
	}
	type cand struct{ batch, iter float64 }
	var cands []cand
	lo := math.Max(float64(l.InitBatch), float64(l.MinLocal*k))
	hi := math.Max(float64(l.MaxBatch), lo)
	for i := 0; i < 50; i++ {
		total := lo * math.Pow(hi/lo, float64(i)/49)
		m, s := fixedSplit(l, k, total)
		if m < l.MinLocal || m > l.MaxLocal {
			continue
		}
		step, sync := app.StepTimes(placement, float64(m))
		cands = append(cands, cand{float64(k * m * (s + 1)), step + float64(s)*(step-sync)})
	}
	if len(cands) == 0 {
		m, s := fixedSplit(l, k, lo)
		step, sync := app.StepTimes(placement, float64(m))
		cands = append(cands, cand{float64(k * m * (s + 1)), step + float64(s)*(step-sync)})
	}
	total := 0.0
	for e := 0; e < app.MaxEpochs(); e++ {
		best := 0.0
		for _, c := range cands {
			g := app.GradStats(c.batch, e).Gain(c.batch, float64(l.InitBatch))
			best = math.Max(best, g/c.iter)
		}
		if best > 0 {
			total += (app.EpochEnd(e+1) - app.EpochEnd(e)) / best
		}
	}
	return total
}
