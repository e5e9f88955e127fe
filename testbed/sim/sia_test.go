package sim

import (
	"context"
	"math"
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
