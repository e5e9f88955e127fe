package optimizer_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// TestDesiredNodes checks the artifact's size rule on fronts worked out by
// hand (band [0.35, 0.65], midpoint 0.5).
func TestDesiredNodes(t *testing.T) {
	pt := func(n int, fit, util float64) optimizer.SizePoint {
		return optimizer.SizePoint{Nodes: n, Fitness: fit, Utility: util}
	}
	cases := []struct {
		name    string
		front   []optimizer.SizePoint
		current int
		want    int
	}{
		{"empty front keeps the size", nil, 3, 3},
		{"fittest point within the cluster is in the band: keep",
			[]optimizer.SizePoint{pt(1, 1, 0.9), pt(2, 1.5, 0.6), pt(3, 1.8, 0.4)}, 2, 2},
		{"band edges are inclusive",
			[]optimizer.SizePoint{pt(1, 1, 0.9), pt(2, 1.5, 0.35)}, 2, 2},
		// keep point (1 node) has 0.8: walk 0.8 (take, first), 0.7 (|0.2| <
		// |0.3|: take), 0.55 (|0.05|: take), 0.44 (|0.06|: no) -> 3.
		{"utility too high: grow to the size nearest the midpoint",
			[]optimizer.SizePoint{pt(1, 1, 0.8), pt(2, 1.7, 0.7), pt(3, 2.2, 0.55), pt(4, 2.4, 0.44)}, 1, 3},
		{"the front is walked by size whatever its order",
			[]optimizer.SizePoint{pt(4, 2.4, 0.44), pt(2, 1.7, 0.7), pt(1, 1, 0.8), pt(3, 2.2, 0.55)}, 1, 3},
		// keep point (4 nodes) has 0.2: walk 0.9 (take), 0.52 (|0.02|:
		// take), 0.3 and 0.2 (farther: no) -> 2.
		{"utility too low: shrink to the size nearest the midpoint",
			[]optimizer.SizePoint{pt(1, 1, 0.9), pt(2, 1.2, 0.52), pt(3, 1.3, 0.3), pt(4, 1.35, 0.2)}, 4, 2},
		// Nothing fits the current size 0; 0.5 is taken first, then 0.9
		// with more fitness beats it on both counts and is taken although
		// farther from the midpoint.
		{"a point better on utility and fitness wins over the midpoint",
			[]optimizer.SizePoint{pt(1, 1, 0.5), pt(2, 2, 0.9)}, 0, 2},
		// keep point (3 nodes) has 0.1: 0.3 (take), 0.2, 0.1 (farther) -> 1.
		{"every size below the band: the least bad one",
			[]optimizer.SizePoint{pt(1, 1, 0.3), pt(2, 1.5, 0.2), pt(3, 1.8, 0.1)}, 3, 1},
		// The keep point is the fittest within 5 nodes (the 4-node one at
		// 0.9, out of the band): 0.9 (take), 0.5 at 6 nodes (take) -> 6.
		{"the keep point is the fittest one within the cluster",
			[]optimizer.SizePoint{pt(4, 2, 0.9), pt(6, 3, 0.5)}, 5, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := optimizer.DesiredNodes(c.front, c.current, 0.35, 0.65); got != c.want {
				t.Fatalf("DesiredNodes = %d, want %d", got, c.want)
			}
		})
	}
}

// imagenetLike is a fitted-looking model of an image classifier on 4-GPU
// nodes (the magnitudes of the artifact's ImageNet traces) with gradient
// noise grad_var / grad_sqr = noise.
func imagenetLike(noise float64) *goodput.Model {
	return &goodput.Model{
		Params: goodput.Params{AlphaC: 0.064, BetaC: 0.0045, AlphaN: 0.3, BetaN: 0.0066, AlphaR: 0.077, BetaR: 5e-4, Gamma: 2.5},
		Grad:   goodput.GradStats{GradSqr: 1, GradVar: noise},
		Limits: goodput.Limits{InitBatch: 200, MaxBatch: 12800, MinLocal: 20, MaxLocal: 200, Accumulation: true},
	}
}

// cloudSnap is one job of model md on real nodes of 4 GPUs, running on all
// of them.
func cloudSnap(md *goodput.Model, real int) *optimizer.Snapshot {
	snap := &optimizer.Snapshot{Seed: 7, Now: 3600}
	var cur optimizer.Placement
	for n := 0; n < real; n++ {
		snap.Nodes = append(snap.Nodes, optimizer.Node{ID: fmt.Sprintf("node-%d", n), GPUs: 4})
		cur = append(cur, optimizer.NodeCount{Node: n, Count: 4})
	}
	snap.Jobs = []optimizer.Job{{ID: "imagenet", Age: 3600, MaxReplicas: 64, Current: cur, Model: md}}
	return snap
}

func cloudSettings() optimizer.Autoscale {
	return optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: 16}
}

// TestAutoscalePolluxFollowsEfficiency checks the direction of the
// decision: a job whose large batches are statistically efficient (high
// gradient noise) makes the cluster grow, one whose large batches are
// wasteful makes it shrink; the front is ordered and its fitness rises
// with the size; the allocation only uses real nodes.
func TestAutoscalePolluxFollowsEfficiency(t *testing.T) {
	cases := []struct {
		name  string
		noise float64
		real  int
		grow  bool
	}{
		{"efficient large batches grow the cluster", 1e5, 2, true},
		{"wasteful large batches shrink it", 1, 8, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := cloudSnap(imagenetLike(c.noise), c.real)
			pol := optimizer.NewAutoscaled(optimizer.NewPollux(), cloudSettings())
			res, err := pol.Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			dec := res.Scale
			if dec == nil {
				t.Fatal("no scale decision")
			}
			if c.grow && dec.Nodes <= c.real || !c.grow && dec.Nodes >= c.real {
				t.Fatalf("desired %d nodes from %d (front %+v)", dec.Nodes, c.real, dec.Front)
			}
			for i := 1; i < len(dec.Front); i++ {
				a, b := dec.Front[i-1], dec.Front[i]
				if !(b.Nodes > a.Nodes && b.Fitness > a.Fitness) {
					t.Fatalf("front not ordered by size with rising fitness: %+v", dec.Front)
				}
			}
			for _, pl := range res.Placements {
				for _, nc := range pl {
					if nc.Node >= c.real {
						t.Fatalf("placement %v uses a node that does not exist yet", pl)
					}
				}
			}
		})
	}
}

// TestAutoscalePolluxUtility checks every front point's utility against
// goodput computed directly from the job's model: a single job on the
// first N nodes of 4 GPUs gets utility goodput(n, k) / goodput(1, 1) / 4N
// for some placement (n, k) it fits, k <= 4N.
func TestAutoscalePolluxUtility(t *testing.T) {
	md := imagenetLike(2000)
	snap := cloudSnap(md, 3)
	res, err := optimizer.NewAutoscaled(optimizer.NewPollux(), cloudSettings()).Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	one, err := md.Optimize(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scale.Front) < 2 {
		t.Fatalf("front %+v", res.Scale.Front)
	}
	for _, pt := range res.Scale.Front {
		match := false
		for k := 1; k <= 4*pt.Nodes && !match; k++ {
			for n := (k + 3) / 4; n <= min(k, pt.Nodes); n++ {
				cfg, err := md.Optimize(n, k)
				if err != nil {
					continue
				}
				// The job's GPUs span n nodes; the utility counts the
				// GPUs of every node in use.
				for held := n; held <= pt.Nodes; held++ {
					if u := cfg.Goodput / one.Goodput / float64(4*held); abs(u-pt.Utility) < 1e-9*u {
						match = true
					}
				}
			}
		}
		if !match {
			t.Fatalf("front point %+v: utility matches no placement's goodput per GPU", pt)
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestAutoscalePolluxEdges covers a round without jobs (the minimum), a
// cluster without nodes (every job waits, the cluster grows), bad
// settings, and determinism whatever the number of workers.
func TestAutoscalePolluxEdges(t *testing.T) {
	s := cloudSettings()
	s.MinNodes = 2
	res, err := optimizer.NewAutoscaled(optimizer.NewPollux(), s).Allocate(&optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "a", GPUs: 4}}}, nil)
	if err != nil || res.Scale == nil || res.Scale.Nodes != 2 || len(res.Placements) != 0 {
		t.Fatalf("no jobs: %+v, %v", res, err)
	}

	snap := cloudSnap(imagenetLike(1e4), 0)
	res, err = optimizer.NewAutoscaled(optimizer.NewPollux(), cloudSettings()).Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale.Nodes < 1 || len(res.Placements) != 1 || len(res.Placements[0]) != 0 {
		t.Fatalf("no nodes: scale %+v, placements %v", res.Scale, res.Placements)
	}

	bad := []optimizer.Autoscale{
		{Template: optimizer.Node{GPUs: 4}, MinNodes: 5, MaxNodes: 4},
		{Template: optimizer.Node{GPUs: 0}, MinNodes: 1, MaxNodes: 4},
		{Template: optimizer.Node{GPUs: 4}, MinNodes: -1, MaxNodes: 4},
		{Template: optimizer.Node{GPUs: 4}, MinNodes: 0, MaxNodes: 0},
		{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: 4, LowUtil: 0.7, HighUtil: 0.6},
	}
	for _, b := range bad {
		if _, err := optimizer.NewAutoscaled(optimizer.NewPollux(), b).Allocate(cloudSnap(imagenetLike(1), 1), nil); !errors.Is(err, optimizer.ErrBadAutoscale) {
			t.Errorf("settings %+v: err %v, want ErrBadAutoscale", b, err)
		}
		if _, err := optimizer.NewThroughputAutoscale(b).Allocate(cloudSnap(imagenetLike(1), 1), nil); !errors.Is(err, optimizer.ErrBadAutoscale) {
			t.Errorf("throughput, settings %+v: err %v, want ErrBadAutoscale", b, err)
		}
	}

	snap = cloudSnap(imagenetLike(3000), 3)
	var first optimizer.Result
	for i, workers := range []int{1, 2, 1} {
		px := optimizer.NewPollux()
		px.Workers = workers
		pol := optimizer.NewAutoscaled(px, cloudSettings())
		res, err := pol.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		res.State = nil
		if i == 0 {
			first = res
		} else if !reflect.DeepEqual(res, first) {
			t.Fatalf("run %d (%d workers) differs:\n%+v\n%+v", i, workers, res, first)
		}
	}
}

// TestThroughputWant checks the throughput rule on a model worked out by
// hand: one second of compute per step at m = 100, free communication
// within a node and 0.2 s across nodes (gamma 1), so T(4) = 400, T(8) =
// 800/1.2 = 666.7, T(12) = 1000, T(16) = 1333.3 samples/s. Going from 4 to
// 8 GPUs adds 266.7, 0.667 of the linear 400: a threshold of 0.8 stops at
// one node, 0.6 goes on; 8 to 12 and 12 to 16 add 333.3 where 0.6 of
// linear is 200; a cap of 10 ends with 2 more GPUs adding 166.7 (T(10) =
// 833.3) where 100 is needed.
func TestThroughputWant(t *testing.T) {
	md := &goodput.Model{
		Params: goodput.Params{AlphaC: 1, BetaC: 1e-8, AlphaN: 0.2, BetaN: 1e-8, AlphaR: 1e-8, BetaR: 1e-8, Gamma: 1},
		Grad:   goodput.GradStats{GradSqr: 1, GradVar: 1},
		Limits: goodput.Limits{InitBatch: 100, MaxBatch: 6400, MinLocal: 10, MaxLocal: 100},
	}
	cases := []struct {
		threshold float64
		maxRep    int
		model     *goodput.Model
		want      int
	}{
		{0.8, 16, md, 4},
		{0.6, 16, md, 16},
		{0.6, 10, md, 10},
		{0.6, 3, md, 3},
		{0.8, 6, nil, 6},
		{0.8, 0, md, 0},
	}
	for _, c := range cases {
		job := &optimizer.Job{ID: "j", MaxReplicas: c.maxRep, Model: c.model}
		if got := optimizer.ThroughputWant(job, 4, c.threshold); got != c.want {
			t.Errorf("threshold %v, max %d, model %v: want %d GPUs, got %d", c.threshold, c.maxRep, c.model != nil, c.want, got)
		}
	}
	// Two jobs asking 16 and 4 GPUs need 5 nodes of 4.
	snap := &optimizer.Snapshot{Nodes: []optimizer.Node{{ID: "a", GPUs: 4}}, Jobs: []optimizer.Job{
		{ID: "x", MaxReplicas: 16, Model: md}, {ID: "y", MaxReplicas: 4, Model: md},
	}}
	pol := optimizer.NewThroughputAutoscale(optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: 1, MaxNodes: 16})
	pol.Threshold = 0.6
	res, err := pol.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale.Nodes != 5 {
		t.Fatalf("desired %d nodes, want 5", res.Scale.Nodes)
	}
}
