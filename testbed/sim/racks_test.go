package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"pollux/optimizer"
	"pollux/testbed/builtin"
	"pollux/testbed/workload"
)

// Two replicas on two nodes of different racks: with the exposed model and
// a ratio of 3, the 0.05 s of sync is paid 3 times, so a step takes 0.25 s
// instead of 0.15 s and 600 steps 150 s; every GPU-second allocated is
// across racks. In one rack, or at ratio 1, nothing changes.
func TestCrossRackSlowsSteps(t *testing.T) {
	job := []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: 2, Batch: 16}}
	pol := fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}, {Node: 1, Count: 1}}}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode = 2, 1
	cfg.Racks, cfg.CrossRackRatio, cfg.CrossRackModel = 2, 3, ExposedModel
	res := toyRun(t, cfg, 1, job, pol)
	if want := 60 + 30 + 150.0; res.Jobs[0].JCT != want {
		t.Errorf("across racks: JCT %v, want %v", res.Jobs[0].JCT, want)
	}
	if f := res.Metrics.CrossRackGPUTimeFrac; f != 1 {
		t.Errorf("cross-rack fraction %v, want 1", f)
	}
	for _, c := range []struct {
		racks int
		ratio float64
	}{{1, 3}, {2, 1}, {0, 0}} {
		cfg.Racks, cfg.CrossRackRatio = c.racks, c.ratio
		res := toyRun(t, cfg, 1, job, pol)
		if want := 60 + 30 + 90.0; res.Jobs[0].JCT != want {
			t.Errorf("%d racks, ratio %v: JCT %v, want %v", c.racks, c.ratio, res.Jobs[0].JCT, want)
		}
		if f := res.Metrics.CrossRackGPUTimeFrac; (f == 1) != (c.racks == 2) {
			t.Errorf("%d racks: cross-rack fraction %v", c.racks, f)
		}
	}
	// The overlap model slows the step too (the toy's sync is all
	// exposed: its fitted model has little overlap to lose).
	cfg.Racks, cfg.CrossRackRatio, cfg.CrossRackModel = 2, 3, OverlapModel
	res = toyRun(t, cfg, 1, job, pol)
	if jct := res.Jobs[0].JCT; !(jct > 60+30+90) {
		t.Errorf("overlap model: JCT %v, no slower than within a rack", jct)
	}
}

// The overlap model scales a placement's step by what the application's
// own model predicts with X times slower network terms: more for larger
// ratios, never less than the step, nothing on one node.
func TestCrossRackOverlapModel(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range cat.Names() {
		app := cat[name]
		l := app.Limits()
		m := float64(l.MinLocal)
		step, sync := app.StepTimes([]int{4, 4}, m)
		prev := step
		for _, x := range []float64{2, 4, 8} {
			c := newCrossRack(x, OverlapModel, 4)
			s2, y2 := c.apply(app, 2, 8, m, step, sync)
			if !(s2 >= prev) || math.Abs((s2-y2)-(step-sync)) > 1e-12 {
				t.Errorf("%s ratio %v: step %v sync %v from %v %v (previous ratio %v)", name, x, s2, y2, step, sync, prev)
			}
			prev = s2
			if one, _ := c.apply(app, 1, 4, m, step, sync); one != step {
				t.Errorf("%s: one node slowed from %v to %v", name, step, one)
			}
		}
		if prev == step {
			t.Errorf("%s: an 8x slower link costs nothing", name)
		}
	}
}

// A cluster of one rack, or of racks the policy and jobs are blind to at
// ratio 1, is exactly today's simulator.
func TestRacksBlindAtRatioOneUnchanged(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	gen := workload.DefaultGenConfig()
	gen.Jobs, gen.Window = 16, 1800
	wl, err := workload.Generate(gen, 5, "small")
	if err != nil {
		t.Fatal(err)
	}
	run := func(racks int, ratio float64, blind bool) *Result {
		cfg := DefaultConfig()
		cfg.Seed = 3
		cfg.Racks, cfg.CrossRackRatio, cfg.RackBlind = racks, ratio, blind
		pol := optimizer.NewPollux()
		pol.Population, pol.Generations = 10, 10
		res, err := Run(context.Background(), cfg, cat, wl, pol, Adaptive, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	base := run(0, 0, false)
	for _, c := range []struct {
		racks int
		ratio float64
		blind bool
	}{{1, 4, false}, {4, 1, true}} {
		got := run(c.racks, c.ratio, c.blind)
		got.Metrics.CrossRackGPUTimeFrac = 0
		for i := range got.Jobs {
			got.Jobs[i].CrossRackGPUSeconds = 0
		}
		if !reflect.DeepEqual(got, base) {
			t.Errorf("%d racks ratio %v blind %v: %+v, want %+v", c.racks, c.ratio, c.blind, got.Metrics, base.Metrics)
		}
	}
}

// On a cluster of 4 racks whose cross-rack link is 4 times slower, the
// rack-aware search keeps more of its GPU time within racks than the
// rack-blind one, and its jobs finish sooner.
func TestRackAwareBeatsBlind(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	gen := workload.DefaultGenConfig()
	gen.Jobs, gen.Window = 40, 4*3600
	wl, err := workload.Generate(gen, 7, "racks")
	if err != nil {
		t.Fatal(err)
	}
	run := func(blind bool) *Result {
		cfg := DefaultConfig()
		cfg.Seed = 1
		cfg.Racks, cfg.CrossRackRatio, cfg.RackBlind = 4, 4, blind
		pol := optimizer.NewPollux()
		pol.Population, pol.Generations = 16, 12
		res, err := Run(context.Background(), cfg, cat, wl, pol, Adaptive, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	aware, blind := run(false), run(true)
	t.Logf("aware: avg JCT %.0f s, cross-rack %.3f; blind: %.0f s, %.3f", aware.Metrics.AvgJCT, aware.Metrics.CrossRackGPUTimeFrac, blind.Metrics.AvgJCT, blind.Metrics.CrossRackGPUTimeFrac)
	if !(aware.Metrics.CrossRackGPUTimeFrac < blind.Metrics.CrossRackGPUTimeFrac) {
		t.Errorf("cross-rack GPU time: aware %v, blind %v", aware.Metrics.CrossRackGPUTimeFrac, blind.Metrics.CrossRackGPUTimeFrac)
	}
	if !(aware.Metrics.AvgJCT < blind.Metrics.AvgJCT) {
		t.Errorf("avg JCT: aware %v, blind %v", aware.Metrics.AvgJCT, blind.Metrics.AvgJCT)
	}
}

func TestRackConfigRefused(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Racks = 17 },
		func(c *Config) { c.Racks = -1 },
		func(c *Config) { c.CrossRackRatio = 0.5 },
		func(c *Config) { c.CrossRackRatio = math.Inf(1) },
		func(c *Config) { c.CrossRackRatio = math.NaN() },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if _, err := ParseCrossRackModel("linear"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown model: %v", err)
	}
}
