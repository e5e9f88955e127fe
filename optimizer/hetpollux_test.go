package optimizer_test

import (
	"errors"
	"math"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// pollux-het's age levels: weight 1 for the first AgeLevel seconds, then
// 2^-AgeDecay per level, each level twice as long as the one before,
// never below AgeFloor.
func TestHetPolluxAgeWeight(t *testing.T) {
	h := optimizer.NewHetPollux()
	off := optimizer.NewHetPollux()
	off.AgeLevel = 0
	for _, c := range []struct {
		pol  *optimizer.HetPollux
		age  float64
		want float64
	}{
		{h, 0, 1},
		{h, 1799, 1},
		{h, 1800, 1 / math.Sqrt2},
		{h, 5399, 1 / math.Sqrt2},
		{h, 5400, 0.5},
		{h, 12599, 0.5},
		{h, 12600, math.Pow(2, -1.5)},
		{h, 26999, math.Pow(2, -1.5)},
		{h, 27000, 0.35}, // level 4 would be 0.25: the floor
		{h, 1e6, 0.35},
		{h, math.NaN(), 1},
		{off, 1e6, 1},
	} {
		if got := c.pol.AgeWeight(c.age); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("AgeLevel %v: weight at age %v = %v, want %v", c.pol.AgeLevel, c.age, got, c.want)
		}
	}
}

// fastJob is a job of the fitted model on "fast" GPUs, up to 8 of them.
func fastJob(id string, age, progress float64) optimizer.Job {
	return optimizer.Job{ID: id, Age: age, Progress: progress, MaxReplicas: 8, RestartDelay: 30,
		TypeModels:   map[string]*goodput.Model{"fast": fittedModel()},
		TypeReplicas: map[string]int{"fast": 8}}
}

// shareFastNode allocates one 8-GPU "fast" node to jobs a and b with h
// and returns the GPUs each got.
func shareFastNode(t *testing.T, h *optimizer.HetPollux, a, b optimizer.Job) (int, int) {
	t.Helper()
	snap := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "f0", GPUs: 8, Type: "fast"}}, Jobs: []optimizer.Job{a, b}}
	res, err := h.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTyped(t, snap, res)
	return res.Placements[0].Replicas(), res.Placements[1].Replicas()
}

// Two jobs alike but for their age share one 8-GPU node: with age levels
// the young one (likely short) gets more GPUs than the one running for
// hours; without them they split evenly.
func TestHetPolluxAgeLevelsFavourYoung(t *testing.T) {
	for _, c := range []struct {
		name     string
		ageLevel float64
		young    func(young, old int) bool
	}{
		{"levels", optimizer.HetAgeLevel, func(y, o int) bool { return y > o }},
		{"no levels", 0, func(y, o int) bool { return y == o }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := optimizer.NewHetPollux()
			h.AgeLevel = c.ageLevel
			y, o := shareFastNode(t, h, fastJob("young", 120, 0), fastJob("old", 8*3600, 0))
			if !c.young(y, o) || y+o != 8 {
				t.Errorf("young got %d GPUs, old %d", y, o)
			}
		})
	}
}

// A new job that would run almost as fast on idle GPUs of another type
// goes there rather than take one GPU from a running job, which would
// restart to run slower: the shrink factor. Without it the running job
// is shrunk.
func TestHetPolluxShrinkFactor(t *testing.T) {
	for _, c := range []struct {
		name   string
		factor float64
		runK   int
		newTyp string
	}{
		{"default", optimizer.HetShrinkFactor, 8, "slow"},
		{"none", 1, 7, "fast"},
	} {
		t.Run(c.name, func(t *testing.T) {
			thr := map[string]float64{"slow": 370, "fast": 400}
			snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{
				{ID: "run", Age: 3600, Restarts: 2, MaxReplicas: 16, Current: pl(1, 8), RestartDelay: 30,
					TypeModels:     map[string]*goodput.Model{"fast": fittedModel()},
					TypeReplicas:   map[string]int{"fast": 8},
					TypeThroughput: thr},
				{ID: "new", Age: 30, MaxReplicas: 1, TypeThroughput: thr},
			}}
			h := optimizer.NewHetPollux()
			h.ShrinkFactor = c.factor
			h.AgeLevel = 0
			res, err := h.Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkTyped(t, snap, res)
			if k := res.Placements[0].Replicas(); k != c.runK {
				t.Errorf("running job got %v, want %d GPUs", res.Placements[0], c.runK)
			}
			if typ := snap.TypeOf(res.Placements[1]); typ != c.newTyp || res.Placements[1].Replicas() != 1 {
				t.Errorf("new job got %v (%s), want one %s GPU", res.Placements[1], typ, c.newTyp)
			}
		})
	}
}

// Age levels, a shrink factor or remaining-time levels that are not
// finite non-negative numbers are refused, not turned into NaN costs.
func TestHetPolluxBadSettings(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{{ID: "a", Age: 60, MaxReplicas: 1}}}
	for _, set := range []func(*optimizer.HetPollux){
		func(h *optimizer.HetPollux) { h.AgeFloor = math.NaN() },
		func(h *optimizer.HetPollux) { h.AgeDecay = -1 },
		func(h *optimizer.HetPollux) { h.AgeLevel = math.Inf(1) },
		func(h *optimizer.HetPollux) { h.ShrinkFactor = math.NaN() },
		func(h *optimizer.HetPollux) { h.RemainLevel = math.Inf(1) },
		func(h *optimizer.HetPollux) { h.RemainFloor = -0.5 },
	} {
		h := optimizer.NewHetPollux()
		set(h)
		if _, err := h.Allocate(snap, nil); !errors.Is(err, optimizer.ErrBadSnapshot) {
			t.Errorf("settings %+v: error %v, want ErrBadSnapshot", *h, err)
		}
	}
}

// A job measured on one fast GPU whose steps are mostly network time
// (all-reduce) there: projected to a type four times slower by its
// compute terms only, many slow GPUs outrun the fast one (the slow
// compute hides the same network cost); projected by scaling its whole
// goodput, the slow type inherits the fast type's poor scaling and the
// job stays on its one fast GPU.
func TestHetPolluxProjectCompute(t *testing.T) {
	for _, c := range []struct {
		name    string
		compute bool
		typ     string
		minK    int
	}{
		{"compute terms", true, "slow", 9},
		{"whole goodput", false, "fast", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			md := fittedModel()
			md.Params.AlphaN, md.Params.BetaN, md.Params.AlphaR = 0.1, 0.01, 0.02
			snap := &optimizer.Snapshot{Nodes: []optimizer.Node{
				{ID: "f0", GPUs: 1, Type: "fast"}, {ID: "s0", GPUs: 8, Type: "slow"}, {ID: "s1", GPUs: 8, Type: "slow"},
			}, Jobs: []optimizer.Job{{ID: "a", Age: 3600, MaxReplicas: 16, RestartDelay: 30,
				TypeModels:     map[string]*goodput.Model{"fast": md},
				TypeReplicas:   map[string]int{"fast": 1},
				TypeThroughput: map[string]float64{"fast": 4, "slow": 1}}}}
			h := optimizer.NewHetPollux()
			h.Optimism = 0 // the projections alone decide
			h.ProjectCompute = c.compute
			res, err := h.Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkTyped(t, snap, res)
			if p := res.Placements[0]; snap.TypeOf(p) != c.typ || p.Replicas() < c.minK {
				t.Errorf("got %v (%s), want at least %d %s GPUs", p, snap.TypeOf(p), c.minK, c.typ)
			}
		})
	}
}

// ShareByBest: a lone new job given its fair share (every GPU of the
// type it runs fastest on, 3 times faster there) is normalised by its
// goodput on that share (12, in one-slow-GPU units); averaged over the
// types by their GPUs, the share is (4*12 + 4*4) / 8 = 8 and the same
// allocation counts 3/2 times as much speedup: the objectives differ by
// (3/2)^p, everything else alike.
func TestHetPolluxShareByBest(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "f0", GPUs: 4, Type: "fast"}, {ID: "s0", GPUs: 4, Type: "slow"}},
		Jobs: []optimizer.Job{{ID: "a", Age: 60, MaxReplicas: 4, TypeThroughput: map[string]float64{"fast": 3, "slow": 1}}}}
	obj := map[bool]float64{}
	for _, best := range []bool{true, false} {
		h := optimizer.NewHetPollux()
		h.ShareByBest = best
		res, err := h.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := res.Placements[0]; snap.TypeOf(p) != "fast" || p.Replicas() != 4 {
			t.Fatalf("ShareByBest %v: got %v, want the 4 fast GPUs", best, p)
		}
		obj[best] = res.Diagnostics.Objective
	}
	want := math.Pow(1.5, optimizer.HetPowerMean)
	if got := obj[false] / obj[true]; math.Abs(got-want) > 1e-3 {
		t.Errorf("objective averaged over types / on the best type = %v, want %v (%v)", got, want, obj)
	}
}

// Two jobs alike in everything, their age included, but how far they are
// through their work share one 8-GPU node. With remaining-time levels
// the one nearly done (5 % left: about six minutes at its pace so far)
// gets more GPUs than the one with 80 % left (eight hours); without
// them, or when the jobs report no progress, they split evenly.
func TestHetPolluxRemainingFavoursNearlyDone(t *testing.T) {
	for _, c := range []struct {
		name       string
		level      float64
		near, far  float64 // the jobs' Progress
		nearFavour func(near, far int) bool
	}{
		{"levels", optimizer.HetRemainLevel, 0.95, 0.2, func(n, f int) bool { return n > f }},
		{"no levels", 0, 0.95, 0.2, func(n, f int) bool { return n == f }},
		{"progress unknown", optimizer.HetRemainLevel, 0, 0, func(n, f int) bool { return n == f }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := optimizer.NewHetPollux()
			h.RemainLevel = c.level
			n, f := shareFastNode(t, h, fastJob("near", 2*3600, c.near), fastJob("far", 2*3600, c.far))
			if !c.nearFavour(n, f) || n+f != 8 {
				t.Errorf("nearly done job got %d GPUs, the other %d", n, f)
			}
		})
	}
}

// A job running on half of an otherwise idle node grows to the whole node
// when it has hours left, and keeps what it has when it is a minute from
// its end: the restart would cost it more than it gains. Without the
// remaining-time discount both grow.
func TestHetPolluxRemainingRestart(t *testing.T) {
	for _, c := range []struct {
		name     string
		restart  bool
		progress float64
		want     int
	}{
		{"hours left", true, 0.3, 8},
		{"a minute left", true, 0.98, 4},
		{"a minute left, no discount", false, 0.98, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := fastJob("a", 3600, c.progress)
			j.Current = pl(0, 4)
			snap := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "f0", GPUs: 8, Type: "fast"}}, Jobs: []optimizer.Job{j}}
			h := optimizer.NewHetPollux()
			h.RemainRestart = c.restart
			res, err := h.Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkTyped(t, snap, res)
			if k := res.Placements[0].Replicas(); k != c.want {
				t.Errorf("job got %v, want %d GPUs", res.Placements[0], c.want)
			}
		})
	}
}

// A job's progress must be a fraction: NaN, infinite, negative or above 1
// is refused by the snapshot check (every policy), not read as a weight.
func TestHetPolluxBadProgress(t *testing.T) {
	for _, p := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.1, 1.5} {
		snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{{ID: "a", Age: 60, Progress: p, MaxReplicas: 1}}}
		for _, pol := range []optimizer.Policy{optimizer.NewHetPollux(), optimizer.NewPollux(), optimizer.NewSia()} {
			if _, err := pol.Allocate(snap, nil); !errors.Is(err, optimizer.ErrBadSnapshot) {
				t.Errorf("%s, progress %v: error %v, want ErrBadSnapshot", pol.Name(), p, err)
			}
		}
	}
	for _, p := range []float64{0, 0.5, 1} {
		snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{{ID: "a", Age: 60, Progress: p, MaxReplicas: 1}}}
		if _, err := optimizer.NewHetPollux().Allocate(snap, nil); err != nil {
			t.Errorf("progress %v: %v", p, err)
		}
	}
}
