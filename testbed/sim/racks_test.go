package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/workload"
)

// toyNet is the toy application's gradients on nodes of 1 GB/s links.
func toyNet(cfg *Config, over float64) {
	cfg.Oversubscription, cfg.NodeBandwidth = over, 1e9
	cfg.GradientBytes = map[string]float64{"toy": 0.05e9}
}

// Two replicas on two nodes of different racks (one node each): the ring
// between the racks moves the toy's 50 MB through uplinks of a third of a
// node's 1 GB/s, 0.15 s instead of 0.05 s, so a step takes 0.25 s instead
// of 0.15 s and 600 steps 150 s; every GPU-second allocated is across
// racks. In one rack, or without oversubscription, nothing changes.
func TestCrossRackSlowsSteps(t *testing.T) {
	job := []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: 2, Batch: 16}}
	pol := fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}, {Node: 1, Count: 1}}}
	cfg := DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode = 2, 1
	cfg.Racks = 2
	toyNet(&cfg, 3)
	res := toyRun(t, cfg, 1, job, pol)
	if want := 60 + 30 + 150.0; res.Jobs[0].JCT != want {
		t.Errorf("across racks: JCT %v, want %v", res.Jobs[0].JCT, want)
	}
	if f := res.Metrics.CrossRackGPUTimeFrac; f != 1 {
		t.Errorf("cross-rack fraction %v, want 1", f)
	}
	if x := res.Jobs[0].TrueCrossRack; math.Abs(x-0.1) > 1e-9 {
		t.Errorf("true cross-rack time %v, want 0.1 s", x)
	}
	for _, c := range []struct {
		racks int
		over  float64
	}{{1, 3}, {2, 1}, {0, 0}} {
		cfg.Racks = c.racks
		toyNet(&cfg, c.over)
		res := toyRun(t, cfg, 1, job, pol)
		if want := 60 + 30 + 90.0; res.Jobs[0].JCT != want {
			t.Errorf("%d racks, oversubscription %v: JCT %v, want %v", c.racks, c.over, res.Jobs[0].JCT, want)
		}
		if f := res.Metrics.CrossRackGPUTimeFrac; (f == 1) != (c.racks == 2) {
			t.Errorf("%d racks: cross-rack fraction %v", c.racks, f)
		}
	}
}

// Jobs crossing the same uplinks share them: two toy jobs across the same
// two racks take longer than one alone, and a job whose restart is not
// over does not use the uplinks yet.
func TestCrossRackJobsInterfere(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode, cfg.Racks = 4, 1, 2
	toyNet(&cfg, 2)
	one := []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: 2, Batch: 16}}
	two := append(one, workload.Job{Name: "b", Time: 0, App: "toy", Replicas: 2, Batch: 16})
	pol := perJobPolicy{
		{{Node: 0, Count: 1}, {Node: 2, Count: 1}},
		{{Node: 1, Count: 1}, {Node: 3, Count: 1}},
	}
	alone := toyRun(t, cfg, 1, one, pol)
	both := toyRun(t, cfg, 1, two, pol)
	// Alone: 50 MB at the uplink's 1 GB/s, no slower than its own node:
	// nothing added. Together: 0.5 GB/s each, 0.05 s more per step.
	if x := alone.Jobs[0].TrueCrossRack; x != 0 {
		t.Errorf("alone: %v s added", x)
	}
	for _, j := range both.Jobs {
		if math.Abs(j.TrueCrossRack-0.05) > 1e-9 || !(j.JCT > alone.Jobs[0].JCT) {
			t.Errorf("together: %+v, alone JCT %v", j, alone.Jobs[0].JCT)
		}
	}
}

// perJobPolicy gives job i the placement pl[i] every round.
type perJobPolicy []optimizer.Placement

func (perJobPolicy) Name() string { return "per-job" }
func (p perJobPolicy) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	out := make([]optimizer.Placement, len(s.Jobs))
	for i, j := range s.Jobs {
		out[i] = p[int(j.ID[0]-'a')]
	}
	return optimizer.Result{Placements: out}, nil
}

// A cluster of one rack is exactly today's simulator, whatever the
// network across racks would be.
func TestOneRackUnchanged(t *testing.T) {
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
	run := func(racks int, over float64, blind bool) *Result {
		cfg := DefaultConfig()
		cfg.Seed = 3
		cfg.Racks, cfg.Oversubscription, cfg.RackBlind = racks, over, blind
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
		over  float64
		blind bool
	}{{4, false}, {1, true}} {
		if got := run(1, c.over, c.blind); !reflect.DeepEqual(got, base) {
			t.Errorf("one rack, oversubscription %v, blind %v: %+v, want %+v", c.over, c.blind, got.Metrics, base.Metrics)
		}
	}
	// Four racks without oversubscription: jobs cross racks, the network
	// adds nothing to any step.
	got := run(4, 1, false)
	if !(got.Metrics.CrossRackGPUTimeFrac > 0) {
		t.Error("no job crossed racks: the check below is empty")
	}
	for _, j := range got.Jobs {
		if j.TrueCrossRack != 0 {
			t.Errorf("oversubscription 1: %s paid %v s per step across racks", j.Name, j.TrueCrossRack)
		}
	}
}

// stagePolicy gives the single job placement pl[round] (the last one
// after the script ends).
type stagePolicy struct {
	pl    []optimizer.Placement
	round int
}

func (*stagePolicy) Name() string { return "script" }
func (p *stagePolicy) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	pl := p.pl[min(p.round, len(p.pl)-1)]
	p.round++
	return optimizer.Result{Placements: []optimizer.Placement{pl}}, nil
}

// A rack-aware job that has run on four nodes of one rack and then on
// four nodes across two racks fits a cross-rack term close to what the
// network added; a blind one fits none.
func TestFittedCrossRackApproachesTruth(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	script := []optimizer.Placement{
		{{Node: 0, Count: 4}},
		{{Node: 0, Count: 4}, {Node: 1, Count: 4}, {Node: 2, Count: 4}, {Node: 3, Count: 4}},
		{{Node: 0, Count: 4}, {Node: 1, Count: 4}, {Node: 4, Count: 4}, {Node: 5, Count: 4}},
	}
	for _, app := range []string{"bert", "imagenet", "yolov3"} {
		for _, blind := range []bool{false, true} {
			cfg := DefaultConfig()
			cfg.Nodes, cfg.Racks, cfg.Oversubscription, cfg.RackBlind = 8, 2, 4, blind
			wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: app, Replicas: 1, Batch: cat[app].Limits().InitBatch}}}
			res, err := Run(context.Background(), cfg, testbed.Catalog{app: cat[app]}, wl, &stagePolicy{pl: script}, Adaptive, nil)
			if err != nil {
				t.Fatal(err)
			}
			j := res.Jobs[0]
			t.Logf("%s blind %v: fitted %.4f s, true %.4f s", app, blind, j.FittedCrossRack, j.TrueCrossRack)
			if !(j.TrueCrossRack > 0) {
				t.Fatalf("%s: the network added nothing across racks", app)
			}
			switch {
			case blind && j.FittedCrossRack != 0:
				t.Errorf("%s blind: fitted %v", app, j.FittedCrossRack)
			case !blind && math.Abs(j.FittedCrossRack-j.TrueCrossRack) > 0.05*j.TrueCrossRack:
				t.Errorf("%s: fitted %v, true %v", app, j.FittedCrossRack, j.TrueCrossRack)
			}
		}
	}
}

// On a cluster of 4 racks with uplinks oversubscribed 4 to 1, the
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
		cfg.Racks, cfg.Oversubscription, cfg.RackBlind = 4, 4, blind
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
		func(c *Config) { c.Oversubscription = 0.5 },
		func(c *Config) { c.Oversubscription = math.Inf(1) },
		func(c *Config) { c.Oversubscription = math.NaN() },
		func(c *Config) { c.NodeBandwidth = -1 },
		func(c *Config) { c.NodeBandwidth = math.Inf(1) },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	// An application of unknown gradient size on several racks.
	cfg := DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode, cfg.Racks = 2, 1, 2
	cat := testbed.Catalog{"toy": toyApp{epochs: 1}}
	wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "toy", Replicas: 1, Batch: 8}}}
	if _, err := Run(context.Background(), cfg, cat, wl, fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}}}, FixedBatch, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown gradient size: %v", err)
	}
}
