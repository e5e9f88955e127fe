package optimizer_test

import (
	"slices"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// A job's GPU type is honoured by the type-aware policies even when the
// other type is faster for it, and by HoldConstraints for the others.
func TestGPUTypeConstraint(t *testing.T) {
	models := map[string]*goodput.Model{"slow": fittedModel(), "fast": fittedModel()}
	tput := map[string]float64{"slow": 100, "fast": 400}
	snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{
		{ID: "pinned", Age: 600, MaxReplicas: 8, App: "cifar10", GPUType: "slow", TypeModels: models, TypeThroughput: tput},
		{ID: "free", Age: 600, MaxReplicas: 2, App: "cifar10", TypeModels: models, TypeThroughput: tput},
	}}
	for _, pol := range []optimizer.Policy{optimizer.NewHetPollux(), optimizer.NewSia()} {
		res, err := pol.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkTyped(t, snap, res)
		if p := res.Placements[0]; len(p) == 0 || snap.TypeOf(p) != "slow" {
			t.Errorf("%s: pinned job placed at %v", pol.Name(), p)
		}
		if held, err := optimizer.HoldConstraints(snap, &res); err != nil || len(held) != 0 {
			t.Errorf("%s: a type-aware policy's result breaks constraints: %v %v", pol.Name(), held, err)
		}
	}
	// A type-blind result that puts the pinned job on the fast node is
	// held; the other job's placement stays.
	res := optimizer.Result{Placements: []optimizer.Placement{pl(1, 4), pl(0, 2)}, Layouts: [][]int{{4}, {2}}}
	held, err := optimizer.HoldConstraints(snap, &res)
	if err != nil || !slices.Equal(held, []int{0}) || res.Placements[0] != nil || res.Layouts[0] != nil || res.Placements[1].Replicas() != 2 {
		t.Fatalf("held %v (%v): %v", held, err, res.Placements)
	}
}

// A required rack is broken by a placement over two racks.
func TestViolationsRequiredTopology(t *testing.T) {
	snap := &optimizer.Snapshot{
		Nodes: []optimizer.Node{{ID: "a", GPUs: 4, Topology: []string{"r1"}}, {ID: "b", GPUs: 4, Topology: []string{"r2"}}, {ID: "c", GPUs: 4, Topology: []string{"r1"}}},
		Jobs:  []optimizer.Job{{ID: "req", MaxReplicas: 8, Topology: optimizer.TopologyConstraint{Required: "rack"}}, {ID: "any", MaxReplicas: 8}},
	}
	spread := optimizer.Placement{{Node: 0, Count: 4}, {Node: 1, Count: 4}}
	inRack := optimizer.Placement{{Node: 0, Count: 4}, {Node: 2, Count: 4}}
	got, err := optimizer.Violations(snap, []optimizer.Placement{spread, spread})
	if err != nil || !slices.Equal(got, []int{0}) {
		t.Errorf("spread: %v %v", got, err)
	}
	if got, _ := optimizer.Violations(snap, []optimizer.Placement{inRack, nil}); len(got) != 0 {
		t.Errorf("within a rack: %v", got)
	}
}

// The type-aware policies never give a job fewer GPUs than its minimum
// (the live round refuses such a placement), and HoldConstraints holds a
// placement outside the bounds.
func TestTypedPoliciesHonourMinReplicas(t *testing.T) {
	models := map[string]*goodput.Model{"slow": fittedModel(), "fast": fittedModel()}
	snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{
		{ID: "eight", Age: 600, MinReplicas: 8, MaxReplicas: 16, App: "cifar10", TypeModels: models},
		{ID: "small-1", Age: 600, MaxReplicas: 4, App: "cifar10", TypeModels: models},
		{ID: "small-2", Age: 600, MaxReplicas: 4, App: "cifar10", TypeModels: models},
		{ID: "small-3", Age: 600, MaxReplicas: 4, App: "cifar10", TypeModels: models},
	}}
	for _, pol := range []optimizer.Policy{optimizer.NewHetPollux(), optimizer.NewSia()} {
		res, err := pol.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkTyped(t, snap, res)
		if k := res.Placements[0].Replicas(); k != 0 && k < 8 {
			t.Errorf("%s: a job of at least 8 replicas got %d", pol.Name(), k)
		}
	}
	res := optimizer.Result{Placements: []optimizer.Placement{pl(1, 6), pl(0, 2), nil, nil}}
	if held, _ := optimizer.HoldConstraints(snap, &res); !slices.Equal(held, []int{0}) {
		t.Errorf("held %v", held)
	}
}

// A job whose rack is required is offered only counts one rack of a type
// holds: it runs in one rack rather than wait for a count no rack has (a
// job without a model per type asks for every GPU of its type).
func TestTypedPoliciesRequiredRack(t *testing.T) {
	snap := &optimizer.Snapshot{
		Nodes: []optimizer.Node{
			{ID: "a0", GPUs: 4, Type: "t4", Topology: []string{"r0"}},
			{ID: "a1", GPUs: 4, Type: "t4", Topology: []string{"r1"}},
			{ID: "a2", GPUs: 4, Type: "a100", Topology: []string{"r0"}},
			{ID: "a3", GPUs: 4, Type: "t4", Topology: []string{"r1"}},
		},
		Jobs: []optimizer.Job{
			{ID: "rack", Age: 600, MaxReplicas: 16, App: "cifar10", GPUType: "t4", Topology: optimizer.TopologyConstraint{Required: "rack"},
				Model: fittedModel()},
		},
	}
	for _, pol := range []optimizer.Policy{optimizer.NewHetPollux(), optimizer.NewSia()} {
		res, err := pol.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := res.Placements[0]; len(p) == 0 || snap.Racks(p) != 1 || snap.TypeOf(p) != "t4" {
			t.Errorf("%s: the job without a model per type placed at %v", pol.Name(), p)
		}
	}
}
