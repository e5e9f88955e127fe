package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/workload"
)

// toyApp is an application with closed-form truth: a step takes 0.1 s plus
// 0.05 s of sync per extra replica beyond the first, no gradient noise
// benefit from larger batches (gain 1), and each epoch is 600 steps.
type toyApp struct{ epochs int }

func (toyApp) Name() string { return "toy" }
func (toyApp) Limits() goodput.Limits {
	return goodput.Limits{InitBatch: 8, MaxBatch: 64, MinLocal: 8, MaxLocal: 8, Accumulation: true}
}
func (a toyApp) MaxEpochs() int { return a.epochs }
func (toyApp) StepTimes(p []int, _ float64) (float64, float64) {
	sync := 0.05 * float64(testbed.Replicas(p)-1)
	return 0.1 + sync, sync
}
func (toyApp) GradStats(float64, int) goodput.GradStats { return goodput.GradStats{} }
func (toyApp) EpochEnd(e int) float64                   { return 600 * float64(e) }
func (toyApp) Iterations(_ float64, e int) float64      { return 600 * float64(e) }

// fixedPolicy gives every job the same placement every round.
type fixedPolicy struct{ pl optimizer.Placement }

func (fixedPolicy) Name() string { return "fixed" }
func (f fixedPolicy) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	out := make([]optimizer.Placement, len(s.Jobs))
	for i := range out {
		out[i] = f.pl
	}
	return optimizer.Result{Placements: out}, nil
}

// flipPolicy moves the single job between two nodes every round.
type flipPolicy struct{ round int }

func (*flipPolicy) Name() string { return "flip" }
func (f *flipPolicy) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	f.round++
	return optimizer.Result{Placements: []optimizer.Placement{{{Node: f.round % 2, Count: 1}}}}, nil
}

func toyRun(t *testing.T, cfg Config, epochs int, jobs []workload.Job, pol optimizer.Policy) *Result {
	t.Helper()
	cat := testbed.Catalog{"toy": toyApp{epochs: epochs}}
	res, err := Run(context.Background(), cfg, cat, workload.Workload{Name: "w", Jobs: jobs}, pol, FixedBatch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A job alone on one GPU: it waits for the first round after its
// submission, restarts for 30 s, then trains 2 epochs of 600 steps at
// 0.1 s per step (120 s); the crossing is rounded to the second.
func TestSingleJobJCT(t *testing.T) {
	cfg := DefaultConfig()
	res := toyRun(t, cfg, 2, []workload.Job{{Name: "a", Time: 10, App: "toy", Replicas: 1, Batch: 8}},
		fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}}})
	j := res.Jobs[0]
	// Submitted at 10, first round at 60, 30 s restart, 120 s of training.
	if want := 60 + 30 + 120 - 10.0; j.JCT != want {
		t.Errorf("JCT %v, want %v", j.JCT, want)
	}
	if j.Restarts != 0 || j.GPUSeconds != 150 {
		t.Errorf("restarts %d GPU-seconds %v, want 0 and 150", j.Restarts, j.GPUSeconds)
	}
	if res.Metrics.Makespan != j.Completion-10 || res.Metrics.AvgJCT != j.JCT {
		t.Errorf("metrics %+v", res.Metrics)
	}
}

// Two replicas on two nodes take 0.15 s per step; with gain 1 a step is one
// unit of progress whatever the batch, so 600 steps take 90 s.
func TestPlacementSlowsSteps(t *testing.T) {
	res := toyRun(t, DefaultConfig(), 1, []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: 2, Batch: 16}},
		fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}, {Node: 1, Count: 1}}})
	if want := 60 + 30 + 90.0; res.Jobs[0].JCT != want {
		t.Errorf("JCT %v, want %v", res.Jobs[0].JCT, want)
	}
}

// Moving every round costs a 30 s restart each time: only 30 of every 60 s
// make progress, so 120 s of training need 4 rounds of 30 s.
func TestRestartEveryRound(t *testing.T) {
	res := toyRun(t, DefaultConfig(), 2, []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: 1, Batch: 8}}, &flipPolicy{})
	j := res.Jobs[0]
	if want := 60 + 3*60 + 30 + 30.0; j.JCT != want {
		t.Errorf("JCT %v, want %v", j.JCT, want)
	}
	if j.Restarts != 3 {
		t.Errorf("restarts %d, want 3", j.Restarts)
	}
}

// Two distributed jobs sharing two nodes slow each other down by the
// interference fraction.
func TestInterference(t *testing.T) {
	cfg := DefaultConfig()
	jobs := []workload.Job{
		{Name: "a", Time: 0, App: "toy", Replicas: 2, Batch: 16},
		{Name: "b", Time: 0, App: "toy", Replicas: 2, Batch: 16},
	}
	pol := fixedPolicy{optimizer.Placement{{Node: 0, Count: 1}, {Node: 1, Count: 1}}}
	base := toyRun(t, cfg, 1, jobs, pol)
	cfg.Interference = 0.5
	slow := toyRun(t, cfg, 1, jobs, pol)
	// 90 s of training at half speed take 180 s.
	if got, want := slow.Jobs[0].JCT-base.Jobs[0].JCT, 90.0; got != want {
		t.Errorf("interference added %v s, want %v", got, want)
	}
}

func TestRunErrors(t *testing.T) {
	cat := testbed.Catalog{"toy": toyApp{epochs: 1}}
	pol := fixedPolicy{optimizer.Placement{{Node: 0, Count: 5}}}
	wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "toy", Replicas: 1, Batch: 8}}}
	if _, err := Run(context.Background(), DefaultConfig(), cat, wl, pol, FixedBatch, nil); !errors.Is(err, ErrPolicy) {
		t.Errorf("over-full node: %v", err)
	}
	bad := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "nope", Replicas: 1, Batch: 8}}}
	if _, err := Run(context.Background(), DefaultConfig(), cat, bad, pol, FixedBatch, nil); !errors.Is(err, ErrUnknownApp) {
		t.Errorf("unknown app: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Interval = 0
	if _, err := Run(context.Background(), cfg, cat, wl, pol, FixedBatch, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("zero interval: %v", err)
	}
	cfg = DefaultConfig()
	cfg.Horizon = 120
	never := fixedPolicy{}
	if _, err := Run(context.Background(), cfg, cat, wl, never, FixedBatch, nil); !errors.Is(err, ErrHorizon) {
		t.Errorf("horizon: %v", err)
	}
}

func TestQuantile(t *testing.T) {
	xs := []float64{4, 1, 3, 2}
	for _, tt := range []struct{ q, want float64 }{{0, 1}, {1, 4}, {0.5, 2.5}, {0.99, 3.97}} {
		if got := Quantile(xs, tt.q); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("q %v: %v, want %v", tt.q, got, tt.want)
		}
	}
}

// The same seed gives the same result, on the built-in profiles with the
// Pollux policy (whose search is randomised).
func TestDeterministic(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	gen := workload.DefaultGenConfig()
	gen.Jobs, gen.Window = 12, 1800
	wl, err := workload.Generate(gen, 3, "small")
	if err != nil {
		t.Fatal(err)
	}
	run := func() *Result {
		cfg := DefaultConfig()
		cfg.Seed = 9
		pol := optimizer.NewPollux()
		pol.Population, pol.Generations = 10, 10
		res, err := Run(context.Background(), cfg, cat, wl, pol, Adaptive, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Errorf("same seed, different results: %+v vs %+v", a.Metrics, b.Metrics)
	}
	fits := 0
	for _, j := range a.Jobs {
		fits += j.Fits
	}
	if fits == 0 {
		t.Error("no job fitted its throughput model")
	}
}
