package optimizer

import (
	"fmt"
	"math"
)

// DefaultScalingThreshold is the throughput-based autoscaler's default
// scaling threshold: one more node's GPUs are worth having while they add
// at least this fraction of what linear scaling would.
const DefaultScalingThreshold = 0.8

// ThroughputAutoscale is the throughput-based cluster autoscaling the
// Pollux paper compares with (Or et al., "Resource Elasticity in
// Distributed Deep Learning", MLSys 2020): each job asks for more GPUs, a
// node's worth at a time, while its system throughput at a fixed per-GPU
// batch keeps scaling at least Threshold times linearly; the cluster is
// sized to hold what the jobs ask for. Statistical efficiency plays no
// part. The GPUs of the nodes present are allocated by Pollux, so that
// against AutoscalePollux only the sizing rule differs.
type ThroughputAutoscale struct {
	// Pollux allocates the GPUs of the current nodes.
	Pollux *Pollux
	// Settings bound the cluster; the template's GPUs are the step a
	// job grows by.
	Settings Autoscale
	// Threshold is the scaling efficiency, in (0, 1], a step must keep;
	// 0 means DefaultScalingThreshold.
	Threshold float64
}

// NewThroughputAutoscale returns the baseline with the default threshold.
func NewThroughputAutoscale(s Autoscale) *ThroughputAutoscale {
	return &ThroughputAutoscale{Pollux: NewPollux(), Settings: s}
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
func (t *ThroughputAutoscale) Allocate(snap *Snapshot, prev *State) (Result, error) {
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
	dec := &ScaleDecision{Current: len(snap.Nodes)}
	want := 0
	for j := range snap.Jobs {
		want += ThroughputWant(&snap.Jobs[j], s.Template.GPUs, t.threshold())
	}
	dec.Nodes = s.clamp(ceilDiv(want, s.Template.GPUs))
	if len(snap.Jobs) == 0 {
		dec.Nodes = s.clamp(0)
		return Result{Placements: []Placement{}, Scale: dec}, nil
	}
	if len(snap.Nodes) == 0 {
		// Nothing to allocate yet: every job waits for the first node.
		return Result{Placements: make([]Placement, len(snap.Jobs)), Scale: dec}, nil
	}
	res, err := t.Pollux.Allocate(snap, prev)
	if err != nil {
		return Result{}, err
	}
	res.Scale = dec
	return res, nil
}

// ThroughputWant is the GPUs a job asks the throughput-based autoscaler
// for on nodes of perNode GPUs: one node's worth (or its MaxReplicas if
// fewer), then another node's worth at a time, up to MaxReplicas, while
// the added GPUs raise its throughput by at least threshold times their
// share of linear scaling: T(k') - T(k) >= threshold * (k'-k) * T(k)/k,
// with T the model's throughput at a fixed per-GPU batch (M0 within the
// job's atomic-batch range, no accumulation, the replicas packed on
// ceil(k/perNode) nodes). A job without a model asks for MaxReplicas.
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
		tk, tn := thr(k), thr(next)
		if !(tn-tk >= threshold*float64(next-k)*tk/float64(k)) || math.IsNaN(tn) {
			break
		}
		k = next
	}
	return k
}
