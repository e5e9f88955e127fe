package optimizer

import (
	"fmt"
	"math"
	"sort"
)

// DefaultScalingThreshold is the throughput-based autoscaler's default
// scaling threshold: one more node's GPUs are worth having while they add
// at least this fraction of what linear scaling would.
const DefaultScalingThreshold = 0.8

// ThroughputAutoscale is the throughput-based cluster autoscaling the
// Pollux paper compares with (Or et al., MLSys 2020): each job asks for
// GPUs a node's worth at a time while its throughput at a fixed per-GPU
// batch keeps scaling (ThroughputWant), the cluster is sized to the asks,
// and jobs get theirs in submission order, placed as Optimus places.
// Statistical efficiency plays no part. Stateless (docs/autoscaling.md,
// "The throughput-based baseline").
type ThroughputAutoscale struct {
	// Settings bound the cluster; the template's GPUs are the step a
	// job grows by.
	Settings Autoscale
	// Threshold is the scaling efficiency, in (0, 1], a step must keep;
	// 0 means DefaultScalingThreshold.
	Threshold float64
}

// NewThroughputAutoscale returns the baseline with the default threshold.
func NewThroughputAutoscale(s Autoscale) *ThroughputAutoscale {
	return &ThroughputAutoscale{Settings: s}
}

// Name implements Policy.
func (t *ThroughputAutoscale) Name() string { return "throughput-autoscale" }

func (t *ThroughputAutoscale) threshold() float64 {
	if t.Threshold == 0 {
		return DefaultScalingThreshold
	}
	return t.Threshold
}

// Allocate implements Policy.
func (t *ThroughputAutoscale) Allocate(snap *Snapshot, _ *State) (Result, error) {
	s := t.Settings.withDefaults()
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	if th := t.threshold(); !(th > 0 && th <= 1) {
		return Result{}, fmt.Errorf("%w: scaling threshold %v, want (0, 1]", ErrBadAutoscale, th)
	}
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	jobs := snap.Jobs
	want := make([]int, len(jobs))
	total := 0
	for j := range jobs {
		want[j] = ThroughputWant(&jobs[j], s.Template.GPUs, t.threshold())
		total += want[j]
	}
	res := Result{
		Placements: make([]Placement, len(jobs)),
		Layouts:    make([][]int, len(jobs)),
		Scale:      &ScaleDecision{Nodes: s.clamp(ceilDiv(total, s.Template.GPUs)), Current: len(snap.Nodes)},
	}
	if total == 0 || len(jobs) == 0 {
		res.Scale.Nodes = s.clamp(0)
		if len(jobs) == 0 {
			return res, nil
		}
	}
	if snap.TotalGPUs() == 0 {
		// No node yet: every job waits for the first ones.
		return res, nil
	}
	if err := validate(snap); err != nil {
		return Result{}, err
	}
	order := make([]int, len(jobs))
	for j := range order {
		order[j] = j
	}
	sort.SliceStable(order, func(a, b int) bool {
		ja, jb := order[a], order[b]
		if jobs[ja].SubmitTime != jobs[jb].SubmitTime {
			return jobs[ja].SubmitTime < jobs[jb].SubmitTime
		}
		return jobs[ja].ID < jobs[jb].ID
	})
	left := snap.TotalGPUs()
	k := make([]int, len(jobs))
	for _, j := range order {
		k[j] = min(want[j], left)
		left -= k[j]
	}
	free := keepCurrent(snap, order, res.Placements, func(j int) bool {
		return k[j] > 0 && jobs[j].Current.Replicas() == k[j]
	})
	for _, j := range order {
		if k[j] > 0 && res.Placements[j] == nil {
			res.Placements[j], res.Layouts[j] = takeMostFree(free, k[j])
		}
	}
	return res, nil
}

// ThroughputWant is the GPUs a job asks the throughput-based autoscaler
// for on nodes of perNode GPUs: one node's worth, then another at a time
// up to MaxReplicas, while the added GPUs raise its throughput at a fixed
// per-GPU batch by at least threshold times their share of linear
// scaling. A step beyond MaxProfiled is taken to measure; a job without a
// model asks for MaxReplicas (docs/autoscaling.md).
func ThroughputWant(job *Job, perNode int, threshold float64) int {
	limit := job.MaxReplicas
	if limit <= 0 || perNode <= 0 {
		return 0
	}
	if job.Model == nil {
		return limit
	}
	l := job.Model.Limits
	m := float64(min(max(l.InitBatch, l.MinLocal), l.MaxLocal))
	thr := func(k int) float64 {
		return job.Model.Params.Throughput(ceilDiv(k, perNode), k, m, 0)
	}
	k := min(perNode, limit)
	for k < limit {
		next := min(k+perNode, limit)
		if job.MaxProfiled > 0 && next > job.MaxProfiled {
			k = next
			continue
		}
		tk, tn := thr(k), thr(next)
		if !(tn-tk >= threshold*float64(next-k)*tk/float64(k)) || math.IsNaN(tn) {
			break
		}
		k = next
	}
	return k
}
