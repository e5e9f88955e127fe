package optimizer_test

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

func nodes(n, gpus int) []optimizer.Node {
	out := make([]optimizer.Node, n)
	for i := range out {
		out[i] = optimizer.Node{ID: string(rune('a' + i)), GPUs: gpus}
	}
	return out
}

func pl(pairs ...int) optimizer.Placement {
	var p optimizer.Placement
	for i := 0; i+1 < len(pairs); i += 2 {
		p = append(p, optimizer.NodeCount{Node: pairs[i], Count: pairs[i+1]})
	}
	return p
}

func TestObjective(t *testing.T) {
	// Two model-less jobs on 2 x 4 GPUs: K_fair = 4, scale = 2/8, so one
	// GPU is worth x = 1/4 * 1/4 = 1/16.
	snap := &optimizer.Snapshot{
		Nodes: nodes(2, 4),
		Jobs: []optimizer.Job{
			{ID: "a", Age: 90, Attained: 90, Restarts: 1, MaxReplicas: 8, Current: pl(0, 1)},
			{ID: "b", Age: 10, MaxReplicas: 8},
		},
	}
	x1 := 1.0 / 16
	factorA := (90.0 - 30) / (90 + 30)
	tests := []struct {
		name  string
		p     float64
		alloc []optimizer.Placement
		want  float64
	}{
		{"current, p=-1", -1, []optimizer.Placement{pl(0, 1), nil}, 2 / (1/(x1+1e-3) + 1/1e-3)},
		{"moved a pays the restart penalty", -1, []optimizer.Placement{pl(1, 1), pl(0, 2)},
			2 / (1/(x1*factorA+1e-3) + 1/(2*x1*10/40+1e-3))},
		{"p=1 is the arithmetic mean", 1, []optimizer.Placement{pl(0, 1), pl(1, 4)}, (x1 + 1e-3 + 4*x1*10/40 + 1e-3) / 2},
		{"p=0 is the geometric mean", 0, []optimizer.Placement{pl(0, 1), pl(1, 4)}, math.Sqrt(x1 * 4 * x1 * 10 / 40)},
		{"p=-2", -2, []optimizer.Placement{pl(0, 1), nil}, math.Pow((math.Pow(x1+1e-3, -2)+math.Pow(1e-3, -2))/2, -0.5)},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, err := optimizer.NewObjective(snap, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if got := obj.Fitness(tt.alloc); math.Abs(got-tt.want) > 1e-12*tt.want {
				t.Errorf("fitness %.15g, want %.15g", got, tt.want)
			}
		})
	}
	obj, _ := optimizer.NewObjective(snap, -1)
	if n, k := obj.FairShare(); n != 1 || k != 4 {
		t.Errorf("fair share (%d, %d), want (1, 4)", n, k)
	}
	if o := obj.Order(); !reflect.DeepEqual(o, []int{1, 0}) {
		t.Errorf("order %v, want [1 0] (b has less attained service)", o)
	}
}

func TestObjectiveModelBase(t *testing.T) {
	md := goodput.Model{
		Params: goodput.Params{AlphaC: 0.02, BetaC: 1e-3, AlphaN: 0.2, BetaN: 1e-3, AlphaR: 0.03, BetaR: 1e-3, Gamma: 2},
		Grad:   goodput.GradStats{GradSqr: 0.1, GradVar: 2},
		Limits: goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512, Accumulation: true},
	}
	snap := &optimizer.Snapshot{Nodes: nodes(4, 4), Jobs: []optimizer.Job{
		{ID: "a", Age: 100, MaxReplicas: 16, Model: &md},
		{ID: "b", Age: 100, MaxReplicas: 16},
	}}
	obj, err := optimizer.NewObjective(snap, -1)
	if err != nil {
		t.Fatal(err)
	}
	// The fair share is 8 GPUs on 1 node: speedup there is exactly 1.
	if s := obj.Speedup(0, 1, 8); math.Abs(s-1) > 1e-12 {
		t.Errorf("speedup at the fair share %v, want 1", s)
	}
	if s := obj.Speedup(1, 1, 2); s != 0.25 {
		t.Errorf("model-less speedup on 2 GPUs %v, want 2/8", s)
	}
}

func TestBadSnapshots(t *testing.T) {
	good := func() *optimizer.Snapshot {
		return &optimizer.Snapshot{Nodes: nodes(2, 4), Jobs: []optimizer.Job{{ID: "a", Age: 1, MaxReplicas: 4}}}
	}
	tests := []struct {
		name string
		edit func(s *optimizer.Snapshot)
	}{
		{"no GPUs", func(s *optimizer.Snapshot) { s.Nodes = nil }},
		{"duplicate job", func(s *optimizer.Snapshot) { s.Jobs = append(s.Jobs, s.Jobs[0]) }},
		{"duplicate node", func(s *optimizer.Snapshot) { s.Nodes[1].ID = s.Nodes[0].ID }},
		{"min above max", func(s *optimizer.Snapshot) { s.Jobs[0].MinReplicas = 5 }},
		{"unknown node", func(s *optimizer.Snapshot) { s.Jobs[0].Current = pl(2, 1) }},
		{"zero count", func(s *optimizer.Snapshot) { s.Jobs[0].Current = pl(0, 0) }},
		{"negative age", func(s *optimizer.Snapshot) { s.Jobs[0].Age = -1 }},
		{"negative restart delay", func(s *optimizer.Snapshot) { s.Jobs[0].RestartDelay = -1 }},
		{"infinite restart delay", func(s *optimizer.Snapshot) { s.Jobs[0].RestartDelay = math.Inf(1) }},
		{"bad model", func(s *optimizer.Snapshot) { s.Jobs[0].Model = &goodput.Model{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.edit(s)
			for _, p := range []optimizer.Policy{optimizer.NewPollux(), optimizer.NewGreedy(), optimizer.NewRefGA()} {
				if _, err := p.Allocate(s, nil); err == nil || !(errors.Is(err, optimizer.ErrBadSnapshot) || errors.Is(err, optimizer.ErrBadModel)) {
					t.Errorf("%s: error %v", p.Name(), err)
				}
			}
		})
	}
}

func TestPolluxEmptyAndWarmStart(t *testing.T) {
	p := optimizer.NewPollux()
	res, err := p.Allocate(&optimizer.Snapshot{Nodes: nodes(1, 4)}, nil)
	if err != nil || len(res.Placements) != 0 {
		t.Fatalf("empty round: %v, %v", res, err)
	}
	// A job that vanished and a node that vanished are dropped from the
	// adopted population; the new job starts from nothing.
	snap := &optimizer.Snapshot{Nodes: nodes(2, 4), Jobs: []optimizer.Job{
		{ID: "a", Age: 1000, MaxReplicas: 4, Current: pl(0, 2)},
		{ID: "b", Age: 1000, MaxReplicas: 4, Current: pl(1, 2)},
	}}
	first, err := p.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "b", GPUs: 4}, {ID: "z", GPUs: 4}}, Jobs: []optimizer.Job{
		{ID: "b", Age: 1060, MaxReplicas: 4, Current: pl(0, 2)},
		{ID: "c", Age: 5, MaxReplicas: 4},
	}}
	res, err = p.Allocate(next, first.State)
	if err != nil {
		t.Fatal(err)
	}
	if res.Placements[0].Replicas() == 0 || res.Placements[1].Replicas() == 0 {
		t.Errorf("warm round left a job without GPUs: %v", res.Placements)
	}
}

func TestAssignGPUs(t *testing.T) {
	ns := nodes(2, 4)
	jobs := []optimizer.Job{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	prev := map[string][]optimizer.GPU{
		"a":    {{Node: "a", Index: 2}, {Node: "a", Index: 3}},
		"b":    {{Node: "a", Index: 0}, {Node: "b", Index: 1}},
		"gone": {{Node: "b", Index: 0}},
	}
	// a unchanged, b grows on node a and leaves node b, c is new.
	got, err := optimizer.AssignGPUs(ns, jobs, []optimizer.Placement{pl(0, 2), pl(0, 2), pl(1, 3)}, prev)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]optimizer.GPU{
		"a": {{Node: "a", Index: 2}, {Node: "a", Index: 3}},
		"b": {{Node: "a", Index: 0}, {Node: "a", Index: 1}},
		"c": {{Node: "b", Index: 0}, {Node: "b", Index: 1}, {Node: "b", Index: 2}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	bad := []struct {
		name  string
		alloc []optimizer.Placement
		prev  map[string][]optimizer.GPU
	}{
		{"over capacity", []optimizer.Placement{pl(0, 3), pl(0, 2), nil}, nil},
		{"unknown node", []optimizer.Placement{nil, nil, nil}, map[string][]optimizer.GPU{"a": {{Node: "q"}}}},
		{"index out of range", []optimizer.Placement{nil, nil, nil}, map[string][]optimizer.GPU{"a": {{Node: "a", Index: 4}}}},
		{"held twice", []optimizer.Placement{nil, nil, nil}, map[string][]optimizer.GPU{"a": {{Node: "a"}}, "b": {{Node: "a"}}}},
		{"unsorted placement", []optimizer.Placement{pl(1, 1, 0, 1), nil, nil}, nil},
		{"length", []optimizer.Placement{nil}, nil},
	}
	for _, tt := range bad {
		if _, err := optimizer.AssignGPUs(ns, jobs, tt.alloc, tt.prev); !errors.Is(err, optimizer.ErrBadAssignment) {
			t.Errorf("%s: error %v", tt.name, err)
		}
	}
}

type tableOracle struct {
	steps []float64 // step time on k GPUs is steps[k-1]
	iters float64
}

func (o tableOracle) StepTime(k int) float64  { return o.steps[min(k, len(o.steps))-1] }
func (o tableOracle) RemainingIters() float64 { return o.iters }

func TestTiresias(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 2}}, Jobs: []optimizer.Job{
		// Demoted (1 h x 16 GPUs... 4 GPUs x 5 h = 20 GPU-hours): queue 1.
		{ID: "old", SubmitTime: 0, Replicas: 4, Executed: 5 * 3600, Current: pl(0, 4)},
		{ID: "running", SubmitTime: 5, Replicas: 2, Executed: 60, Current: pl(1, 2)},
		{ID: "new", SubmitTime: 10, Replicas: 3},
		{ID: "late", SubmitTime: 20, Replicas: 1},
	}}
	res, err := optimizer.Tiresias{}.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Queue 0: running (kept), new (3 on the emptiest node a), late (1 on
	// a); queue 1: old no longer fits and is preempted.
	want := []optimizer.Placement{nil, pl(1, 2), pl(0, 3), pl(0, 1)}
	if !reflect.DeepEqual(res.Placements, want) {
		t.Errorf("got %v, want %v", res.Placements, want)
	}
}

func TestOptimus(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 2}}, Jobs: []optimizer.Job{
		// Gains: x from 1->2 GPUs is (10-5)*100 = 500, then (5-4)*100.
		{ID: "x", SubmitTime: 0, MaxReplicas: 8, Current: pl(0, 2), Oracle: tableOracle{[]float64{10, 5, 4, 3.9}, 100}},
		// y: (8-4)*50 = 200, then (4-3)*50 = 50.
		{ID: "y", SubmitTime: 1, MaxReplicas: 8, Oracle: tableOracle{[]float64{8, 4, 3, 2.9}, 50}},
		// z: capped at one GPU.
		{ID: "z", SubmitTime: 2, MaxReplicas: 1, Oracle: tableOracle{[]float64{1, 0.1}, 1e6}},
	}}
	res, err := optimizer.Optimus{}.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 6 GPUs: 1 each, then x (500) -> 2, y (200) -> 2, x (100) -> 3.
	// x changed size: placed after the smaller ones. Fewest first: z (1)
	// on a, y (2) on a, x (3) on a then b.
	want := []optimizer.Placement{pl(0, 1, 1, 2), pl(0, 2), pl(0, 1)}
	if !reflect.DeepEqual(res.Placements, want) {
		t.Errorf("got %v, want %v", res.Placements, want)
	}
	snap.Jobs[1].Oracle = nil
	if _, err := (optimizer.Optimus{}).Allocate(snap, nil); !errors.Is(err, optimizer.ErrNoOracle) {
		t.Errorf("missing oracle: %v", err)
	}
}

func TestEpochProgress(t *testing.T) {
	for _, c := range []struct {
		done, declared int
		want           float64
	}{
		{0, 10, 0}, {3, 10, 0.3}, {10, 10, 1}, {12, 10, 1}, {5, 0, 0}, {-1, 10, 0}, {1, 2, 0.5},
	} {
		if got := optimizer.EpochProgress(c.done, c.declared); got != c.want {
			t.Errorf("EpochProgress(%d, %d) = %v, want %v", c.done, c.declared, got, c.want)
		}
	}
}

// TestPolluxMeasuredRestart: a job 40 s old that restarted once, on 1 of
// 4 GPUs, gains 4x on all 4. At the assumed 30 s a restart is not worth
// it (factor 10/70: 4 x 0.14 < 1); at the 2 s it measured it is (38/42),
// but only for a policy that weighs measured delays: Pollux's search and
// the greedy climb a new leader's first round runs alike.
func TestPolluxMeasuredRestart(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: nodes(1, 4), Seed: 1,
		Jobs: []optimizer.Job{{ID: "a", Age: 40, Restarts: 1, MaxReplicas: 4, Current: pl(0, 1), RestartDelay: 2}}}
	tests := []struct {
		name     string
		measured bool
		delay    float64
		want     int
	}{
		{"fixed 30 s", false, 2, 1},
		{"measured 2 s", true, 2, 4},
		{"measured, none yet: 30 s", true, 0, 1},
		{"measured 30 s", true, 30, 1},
	}
	policies := map[string]func(measured bool) optimizer.Policy{
		"pollux": func(m bool) optimizer.Policy { p := optimizer.NewPollux(); p.MeasuredRestart = m; return p },
		"greedy": func(m bool) optimizer.Policy { g := optimizer.NewGreedy(); g.MeasuredRestart = m; return g },
	}
	for name, policy := range policies {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				s := *snap
				s.Jobs = []optimizer.Job{snap.Jobs[0]}
				s.Jobs[0].RestartDelay = tt.delay
				res, err := policy(tt.measured).Allocate(&s, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := res.Placements[0].Replicas(); got != tt.want {
					t.Errorf("%d replicas, want %d", got, tt.want)
				}
			})
		}
	}
}
