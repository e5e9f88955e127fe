package sim

import (
	"context"
	"math"
	"slices"
	"testing"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/clusterspec"
	"pollux/testbed/workload"
)

// typedToy is the toy application on a typed cluster of one node of 4.
func typedToyRun(t *testing.T, cfg Config, app string, jobs []workload.Job, pol optimizer.Policy) *Result {
	t.Helper()
	cats := testbed.TypedCatalog{"t": testbed.Catalog{app: toyApp{epochs: 2}}}
	res, err := RunTyped(context.Background(), cfg, cats, workload.Workload{Name: "w", Jobs: jobs}, pol, FixedBatch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func siaConfig(nodes, gpus int) Config {
	cfg := DefaultConfig()
	cfg.Cluster = []clusterspec.Group{{Type: "t", Nodes: nodes, GPUsPerNode: gpus}}
	cfg.Semantics = SiaSemantics
	cfg.NoFairness = true
	return cfg
}

// Under Sia's semantics a CIFAR-10 job pays Sia's 50 s checkpoint-restore
// delay and trains 1.8 times slower than the traces say: 2 epochs of 600
// steps at 0.1 s take 120 s x 1.8 = 216 s.
func TestSiaCalibrationAndDelay(t *testing.T) {
	res := typedToyRun(t, siaConfig(1, 4), "cifar10", []workload.Job{{Name: "a", Time: 10, App: "cifar10", Replicas: 1, Batch: 8}},
		fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}}})
	if want := 60 + 50 + 216 - 10.0; res.Jobs[0].JCT != want {
		t.Errorf("JCT %v, want %v", res.Jobs[0].JCT, want)
	}
	if res.Jobs[0].GPUType != "t" {
		t.Errorf("GPU type %q, want t", res.Jobs[0].GPUType)
	}
}

// Under Sia's semantics a job moved to other nodes with the same placement
// tuple keeps running (the flip policy moves it every round): no restart,
// unlike the Pollux artifact's (TestRestartEveryRound).
func TestSiaRestartsOnlyOnTupleChange(t *testing.T) {
	res := typedToyRun(t, siaConfig(2, 4), "toy", []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: 1, Batch: 8}}, &flipPolicy{})
	j := res.Jobs[0]
	if j.Restarts != 0 {
		t.Errorf("restarts %d, want 0", j.Restarts)
	}
	if want := 60 + 30 + 120.0; j.JCT != want {
		t.Errorf("JCT %v, want %v", j.JCT, want)
	}
}

// A job alone in the cluster finishes exactly as fast as alone on its
// share (the whole cluster): its finish-time fairness ratio is 1, whatever
// its submission time within the interval. (Its batch size is the
// application's largest: Sia's fairness runs drop the user's batch, which
// otherwise bounds Sia's model.)
func TestSiaFTF(t *testing.T) {
	for _, submit := range []float64{0, 17, 59} {
		cfg := siaConfig(2, 4)
		cfg.NoFairness = false
		cats := testbed.TypedCatalog{"t": testbed.Catalog{"toy": toyApp{epochs: 2}}}
		wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", Time: submit, App: "toy", Replicas: 1, Batch: 64}}}
		res, err := RunTyped(context.Background(), cfg, cats, wl, optimizer.NewSia(), Adaptive, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f := res.Jobs[0].FTF; math.Abs(f-1) > 1e-9 {
			t.Errorf("submitted at %v: FTF %v, want 1", submit, f)
		}
		if res.Metrics.UnfairFrac != 0 {
			t.Errorf("unfair fraction %v", res.Metrics.UnfairFrac)
		}
	}
}

// A policy that spreads one job over two GPU types is refused.
func TestJobOnOneType(t *testing.T) {
	cfg := siaConfig(1, 4)
	cfg.Cluster = []clusterspec.Group{{Type: "a", Nodes: 1, GPUsPerNode: 4}, {Type: "b", Nodes: 1, GPUsPerNode: 4}}
	cats := testbed.TypedCatalog{"a": testbed.Catalog{"toy": toyApp{epochs: 1}}, "b": testbed.Catalog{"toy": toyApp{epochs: 1}}}
	wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "toy", Replicas: 2, Batch: 8}}}
	_, err := RunTyped(context.Background(), cfg, cats, wl, fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}, {Node: 1, Count: 1}}}, FixedBatch, nil)
	if err == nil {
		t.Fatal("a placement over two GPU types was accepted")
	}
}

// progressRecorder gives its one job one GPU of node 0 and records the
// Progress the job reports every round.
type progressRecorder struct{ seen []float64 }

func (*progressRecorder) Name() string { return "record" }
func (p *progressRecorder) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	p.seen = append(p.seen, s.Jobs[0].Progress)
	return optimizer.Result{Placements: []optimizer.Placement{{{Node: 0, Count: 1}}}}, nil
}

// A job reports whole epochs over its epochs, as a live job does, not
// the exact fraction of its work: 4 epochs of 60 s after a 30 s start,
// seen at rounds 60 s apart.
func TestJobReportsWholeEpochs(t *testing.T) {
	rec := &progressRecorder{}
	cats := testbed.TypedCatalog{"t": testbed.Catalog{"toy": toyApp{epochs: 4}}}
	wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "toy", Replicas: 1, Batch: 8}}}
	if _, err := RunTyped(context.Background(), siaConfig(1, 4), cats, wl, rec, FixedBatch, nil); err != nil {
		t.Fatal(err)
	}
	// Rounds at 0, 60 (half an epoch done), 120 (1.5), 180 (2.5), 240 (3.5).
	want := []float64{0, 0, 0.25, 0.5, 0.75}
	if !slices.Equal(rec.seen, want) {
		t.Errorf("progress seen %v, want %v", rec.seen, want)
	}
}
