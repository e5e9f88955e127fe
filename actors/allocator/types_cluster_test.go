package allocator_test

import (
	"math"
	"testing"
	"time"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"pollux/optimizer/goodput"
	"pollux/testbed"
)

// slowApp is an application whose every step, and its synchronisation,
// takes f times as long: the same model on a slower GPU type.
type slowApp struct {
	testbed.Application
	f float64
}

func (a slowApp) StepTimes(placement []int, m float64) (step, sync float64) {
	step, sync = a.Application.StepTimes(placement, m)
	return a.f * step, a.f * sync
}

func slowCatalog(cat testbed.Catalog, f float64) testbed.Catalog {
	out := testbed.Catalog{}
	for name, a := range cat {
		out[name] = slowApp{a, f}
	}
	return out
}

// TestJobBidsAModelPerGPUType: a job runs on an a100 node, then (its node
// cut off) on a t4 node whose emulated workers take 2.5 times as long per
// step. The state records its measurements under each type, and the bids
// the allocator receives carry two distinct per-type models whose
// throughput ratio on every configuration measured on both types is the
// emulated 2.5: the emulator's step times are exact (no noise), and a
// fit of a configuration it was given reproduces it up to the fit's
// small regularisation, so 2 % is the tolerance. A single model fitted on
// both types' measurements (as before) would bid one throughput for
// both.
func TestJobBidsAModelPerGPUType(t *testing.T) {
	const ratio = 2.5
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 2, gpus: 4, timeScale: 100, nodeGrace: 100 * time.Millisecond,
		lease: time.Second, gpuTypes: map[string]string{"n0": "a100", "n1": "t4"}, slower: map[string]float64{"t4": ratio}})
	// Two replicas and a fixed local batch: both types run the same
	// configuration (synchronisation included).
	l := c.cat["imagenet"].Limits()
	l.MinLocal, l.MaxLocal, l.MaxBatch, l.Accumulation = l.InitBatch, l.InitBatch, 2*l.InitBatch, false
	c.submitSpec("j", state.JobSpec{Name: "j", App: "imagenet", MinReplicas: 2, MaxReplicas: 2, Limits: l})
	first := c.waitWorker("job j's first worker", 30*time.Second, func(w *workerRec) bool { return w.job == "j" })
	firstType := c.opts.gpuTypes[first.node]
	poll.Until(t, 30*time.Second, "a measurement of j on "+firstType, func() bool {
		return len(profiledOn(c.any().srv.LocalState().Jobs["j"], firstType)) > 0
	})
	c.partition(first.node, true)
	poll.Until(t, 60*time.Second, "measurements of j on both types", func() bool {
		j := c.any().srv.LocalState().Jobs["j"]
		return len(profiledOn(j, "a100")) > 0 && len(profiledOn(j, "t4")) > 0
	})
	var bid *pb.Bid
	poll.Until(t, 60*time.Second, "a bid of j with models on both types", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		bids := c.bids["j"]
		for i := len(bids) - 1; i >= 0; i-- {
			if len(bids[i].Types) == 2 {
				bid = bids[i]
				return true
			}
		}
		return false
	})
	models := map[string]goodput.Params{}
	for _, tb := range bid.Types {
		models[tb.GpuType] = goodput.ParamsFrom([7]float64(tb.Params))
	}
	fast, slow := models["a100"], models["t4"]
	if fast == slow || fast.Validate() != nil || slow.Validate() != nil {
		t.Fatalf("per-type models %+v", bid.Types)
	}
	// The state, read as any server has it, holds each type's
	// measurements apart: their step times differ by the emulated ratio.
	st := c.any().srv.LocalState()
	onA100, onT4 := profiledOn(st.Jobs["j"], "a100"), profiledOn(st.Jobs["j"], "t4")
	common := 0
	for cfg, e := range onA100 {
		e4, ok := onT4[cfg]
		if !ok {
			continue
		}
		common++
		if got := e4.StepTime / e.StepTime; math.Abs(got/ratio-1) > 1e-6 {
			t.Errorf("%v: measured t4/a100 step times %v, want %v", cfg, got, ratio)
		}
		n, k, m := cfg[0], cfg[1], float64(cfg[2])
		got := fast.Throughput(n, k, m, 0) / slow.Throughput(n, k, m, 0)
		t.Logf("%d nodes, %d replicas, local batch %v: a100 model %.2f samples/s, t4 model %.2f, ratio %.4f",
			n, k, m, fast.Throughput(n, k, m, 0), slow.Throughput(n, k, m, 0), got)
		if math.Abs(got/ratio-1) > 0.02 {
			t.Errorf("%v: bid models' a100/t4 throughput %v, want %v within 2 %%", cfg, got, ratio)
		}
	}
	if common == 0 {
		t.Fatalf("no configuration measured on both types (a100 %v, t4 %v)", onA100, onT4)
	}
	// The untyped top-level model is the one of the type measured most,
	// never a mix of the two.
	top := goodput.ParamsFrom([7]float64(bid.Params))
	if top != fast && top != slow {
		t.Errorf("top-level model %+v is neither type's", top)
	}
}

// profiledOn is j's profile on GPU type t by configuration.
func profiledOn(j *state.Job, t string) map[[3]int]state.ProfileEntry {
	out := map[[3]int]state.ProfileEntry{}
	if j == nil {
		return out
	}
	for _, e := range j.Profile {
		if e.GPUType == t {
			out[[3]int{e.Nodes, e.Replicas, e.LocalBatch}] = e
		}
	}
	return out
}
