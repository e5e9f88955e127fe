package optimizer_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// hetCloudSnap is one job of model md on a100 GPUs (on t4 GPUs its
// computation takes three times as long) on other t4 nodes and real a100
// nodes of 4 GPUs, running on all the a100 nodes.
func hetCloudSnap(md *goodput.Model, other, real int) *optimizer.Snapshot {
	slow := *md
	slow.Params.AlphaC *= 3
	slow.Params.BetaC *= 3
	snap := &optimizer.Snapshot{Seed: 7, Now: 3600}
	for n := 0; n < other; n++ {
		snap.Nodes = append(snap.Nodes, optimizer.Node{ID: fmt.Sprintf("t4-%d", n), GPUs: 4, Type: "t4"})
	}
	var cur optimizer.Placement
	for n := 0; n < real; n++ {
		cur = append(cur, optimizer.NodeCount{Node: len(snap.Nodes), Count: 4})
		snap.Nodes = append(snap.Nodes, optimizer.Node{ID: fmt.Sprintf("a100-%d", n), GPUs: 4, Type: "a100"})
	}
	snap.Jobs = []optimizer.Job{{ID: "imagenet", Age: 3600, MaxReplicas: 64, Current: cur, Model: md,
		TypeModels:     map[string]*goodput.Model{"t4": &slow, "a100": md},
		TypeThroughput: map[string]float64{"t4": 1, "a100": 3}}}
	return snap
}

func hetCloudSettings(lo, hi int) optimizer.Autoscale {
	return optimizer.Autoscale{Template: optimizer.Node{GPUs: 4, Type: "a100"}, MinNodes: lo, MaxNodes: hi}
}

// TestHetAutoscaleDecision is the decision on a cluster of t4 and a100
// nodes whose template is a100: it grows when the job would use more
// a100s efficiently, shrinks when it would not, is clamped to the
// minimum and maximum, never places on nodes that do not exist yet, and
// at a size it keeps allocates what pollux-het alone does.
func TestHetAutoscaleDecision(t *testing.T) {
	cases := []struct {
		name        string
		noise       float64
		other, real int
		lo, hi      int
		want        func(n int) bool
		wantDesc    string
	}{
		{"efficient large batches grow the a100s", 1e5, 1, 1, 1, 16, func(n int) bool { return n > 2 }, "> 2"},
		{"growth is clamped to the maximum", 1e5, 1, 1, 1, 3, func(n int) bool { return n == 3 }, "3"},
		{"wasteful large batches shrink the a100s", 1, 1, 6, 1, 16, func(n int) bool { return n < 7 && n >= 1 }, "in [1, 7)"},
		{"shrinking is clamped to the minimum", 1, 1, 6, 6, 16, func(n int) bool { return n == 6 }, "6"},
		{"other types count in the size and are never taken away", 1, 3, 4, 1, 16, func(n int) bool { return n >= 3 && n < 7 }, "in [3, 7)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := hetCloudSnap(imagenetLike(c.noise), c.other, c.real)
			nReal := c.other + c.real
			res, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), hetCloudSettings(c.lo, c.hi)).Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			dec := res.Scale
			if dec == nil {
				t.Fatal("no scale decision")
			}
			if dec.Current != nReal || !c.want(dec.Nodes) {
				t.Fatalf("desired %d nodes from %d, want %s (front %+v)", dec.Nodes, dec.Current, c.wantDesc, dec.Front)
			}
			for i, pt := range dec.Front {
				if pt.Nodes < c.other {
					t.Fatalf("front point %+v without the %d nodes of other types", pt, c.other)
				}
				if !(pt.Utility > 0 && pt.Utility <= 1+1e-9) || !(pt.Fitness > 0) {
					t.Fatalf("front point %+v: utility or fitness out of range", pt)
				}
				if i > 0 && !(pt.Nodes > dec.Front[i-1].Nodes && pt.Fitness > dec.Front[i-1].Fitness) {
					t.Fatalf("front not ordered by size with rising fitness: %+v", dec.Front)
				}
			}
			checkTyped(t, snap, res)
			for _, pl := range res.Placements {
				for _, nc := range pl {
					if nc.Node >= nReal {
						t.Fatalf("placement %v uses a node that does not exist yet", pl)
					}
				}
			}
			if len(res.Placements[0]) == 0 {
				t.Fatal("the job waits on a cluster that has GPUs")
			}
			if dec.Nodes < nReal {
				return
			}
			own, err := optimizer.NewHetPollux().Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(own.Placements, res.Placements) {
				t.Fatalf("allocation %v, pollux-het's own %v", res.Placements, own.Placements)
			}
		})
	}
}

// TestHetAutoscaleUtility checks the utility of every front point from
// outside: the job's goodput on one of the types (by that type's model,
// packed onto the fewest nodes) over its goodput on one GPU of the same
// type, over the GPUs of the nodes of some size that fits.
func TestHetAutoscaleUtility(t *testing.T) {
	snap := hetCloudSnap(imagenetLike(2000), 1, 2)
	res, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), hetCloudSettings(1, 8)).Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scale.Front) < 2 {
		t.Fatalf("front %+v", res.Scale.Front)
	}
	for _, pt := range res.Scale.Front {
		match := false
		for _, md := range snap.Jobs[0].TypeModels {
			one, err := md.Optimize(1, 1)
			if err != nil {
				t.Fatal(err)
			}
			for k := 1; k <= 4*pt.Nodes && !match; k++ {
				cfg, err := md.Optimize((k+3)/4, k)
				if err != nil {
					continue
				}
				for held := (k + 3) / 4; held <= pt.Nodes; held++ {
					if u := cfg.Goodput / one.Goodput / float64(4*held); math.Abs(u-pt.Utility) < 1e-9*u {
						match = true
					}
				}
			}
		}
		if !match {
			t.Fatalf("front point %+v: utility matches no GPU count's goodput per GPU", pt)
		}
	}
}

// TestHetAutoscaleEdges covers a round without jobs (the minimum), a
// template type no job has a model or throughput on (projected: the
// cluster still grows), a template without a type, bad settings, and
// determinism.
func TestHetAutoscaleEdges(t *testing.T) {
	res, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), hetCloudSettings(2, 8)).Allocate(&optimizer.Snapshot{Nodes: hetNodes()}, nil)
	if err != nil || res.Scale == nil || res.Scale.Nodes != 2 || len(res.Placements) != 0 {
		t.Fatalf("no jobs: %+v, %v", res, err)
	}

	md := imagenetLike(1e5)
	snap := hetCloudSnap(md, 1, 1)
	s := hetCloudSettings(1, 16)
	s.Template.Type = "h100"
	res, err = optimizer.NewAutoscaled(optimizer.NewHetPollux(), s).Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale.Nodes <= 2 {
		t.Errorf("a new type by projection: desired %d nodes from 2 (front %+v)", res.Scale.Nodes, res.Scale.Front)
	}
	checkTyped(t, snap, res)

	s.Template.Type = ""
	if _, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), s).Allocate(snap, nil); !errors.Is(err, optimizer.ErrBadAutoscale) {
		t.Errorf("template without a type: err %v, want ErrBadAutoscale", err)
	}
	bad := hetCloudSettings(5, 4)
	if _, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), bad).Allocate(snap, nil); !errors.Is(err, optimizer.ErrBadAutoscale) {
		t.Errorf("minimum above maximum: err %v, want ErrBadAutoscale", err)
	}
	if _, err := (&optimizer.Autoscaled{Settings: hetCloudSettings(1, 4)}).Allocate(snap, nil); !errors.Is(err, optimizer.ErrBadAutoscale) {
		t.Errorf("no policy: err %v, want ErrBadAutoscale", err)
	}

	// Beyond the exact solver, every size is solved on its own: the
	// decision still grows, within the real nodes.
	snap = hetCloudSnap(imagenetLike(1e5), 1, 1)
	het := optimizer.NewHetPollux()
	het.ExactStates = 1
	lag := optimizer.NewAutoscaled(het, hetCloudSettings(1, 16))
	res, err = lag.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scale.Nodes <= 2 {
		t.Errorf("Lagrangian sizes: desired %d from 2 (front %+v)", res.Scale.Nodes, res.Scale.Front)
	}
	checkTyped(t, snap, res)
	for _, pl := range res.Placements {
		for _, nc := range pl {
			if nc.Node >= 2 {
				t.Fatalf("placement %v uses a node that does not exist yet", pl)
			}
		}
	}

	snap = hetCloudSnap(imagenetLike(3000), 2, 3)
	first, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), hetCloudSettings(1, 16)).Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		again, err := optimizer.NewAutoscaled(optimizer.NewHetPollux(), hetCloudSettings(1, 16)).Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again, first) {
			t.Fatalf("run %d differs:\n%+v\n%+v", i+1, again, first)
		}
	}
}
