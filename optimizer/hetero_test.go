package optimizer_test

import (
	"slices"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// hetNodes is one 4-GPU node of type slow and one 8-GPU node of type fast.
func hetNodes() []optimizer.Node {
	return []optimizer.Node{{ID: "s0", GPUs: 4, Type: "slow"}, {ID: "f0", GPUs: 8, Type: "fast"}}
}

func fittedModel() *goodput.Model {
	return &goodput.Model{
		Params: goodput.Params{AlphaC: 0.05, BetaC: 0.001, AlphaN: 0.1, BetaN: 0.01, AlphaR: 0.02, BetaR: 0.002, Gamma: 1.5},
		Grad:   goodput.GradStats{GradSqr: 1, GradVar: 20},
		Limits: goodput.Limits{InitBatch: 32, MaxBatch: 1024, MinLocal: 8, MaxLocal: 128, Accumulation: true},
	}
}

// checkTyped fails on a placement over capacity or over two types.
func checkTyped(t *testing.T, snap *optimizer.Snapshot, res optimizer.Result) {
	t.Helper()
	used := make([]int, len(snap.Nodes))
	for j, p := range res.Placements {
		for _, nc := range p {
			used[nc.Node] += nc.Count
			if snap.Nodes[nc.Node].Type != snap.TypeOf(p) {
				t.Fatalf("job %d spans GPU types: %v", j, p)
			}
		}
		if k := p.Replicas(); k > snap.Jobs[j].MaxReplicas {
			t.Fatalf("job %d got %d GPUs, max %d", j, k, snap.Jobs[j].MaxReplicas)
		}
	}
	for n, u := range used {
		if u > snap.Nodes[n].GPUs {
			t.Fatalf("node %d over capacity: %d", n, u)
		}
	}
}

// Sia's table: 1, 2, 4 GPUs then whole nodes; a job without a model gets
// one GPU (valued 1 on every type); with a model on the fast type only,
// its slow-type goodput is projected by the one-GPU throughputs.
func TestSiaRound(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: hetNodes(), Jobs: []optimizer.Job{
		{ID: "new", Age: 60, MaxReplicas: 1, App: "cifar10"},
		{ID: "run", Age: 600, MaxReplicas: 8, App: "cifar10", Current: pl(1, 2),
			TypeModels:     map[string]*goodput.Model{"fast": fittedModel()},
			TypeThroughput: map[string]float64{"slow": 100, "fast": 400}},
	}}
	res, err := optimizer.NewSia().Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTyped(t, snap, res)
	if k := res.Placements[0].Replicas(); k != 1 {
		t.Errorf("job without a model got %d GPUs, want 1", k)
	}
	if k := res.Placements[1].Replicas(); !slices.Contains([]int{1, 2, 4, 8}, k) {
		t.Errorf("job got %d GPUs, not a Sia configuration", k)
	}
	if !res.Diagnostics.Exact {
		t.Error("a 12-GPU round was not solved exactly")
	}
	// A job in the middle of a restart keeps its configuration.
	snap.Jobs[1].Restarting = true
	res, err = optimizer.NewSia().Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Placements[1].Replicas(); got != 2 || snap.TypeOf(res.Placements[1]) != "fast" {
		t.Errorf("restarting job moved to %v", res.Placements[1])
	}
}

// A new job values one GPU of every type alike: without RandomTies the
// first type of the snapshot takes it every round, with it the seed decides
// (every type at times, the same type for the same seed).
func TestSiaRandomTies(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(0); seed < 40; seed++ {
		snap := &optimizer.Snapshot{Nodes: hetNodes(), Seed: seed, Jobs: []optimizer.Job{{ID: "new", Age: 60, MaxReplicas: 1}}}
		det, err := optimizer.NewSia().Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		if typ := snap.TypeOf(det.Placements[0]); typ != "slow" {
			t.Fatalf("seed %d: without random ties the new job went to %q, want the first type", seed, typ)
		}
		s := optimizer.NewSia()
		s.RandomTies = true
		a, err := s.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !a.Placements[0].Equal(b.Placements[0]) || a.Placements[0].Replicas() != 1 {
			t.Fatalf("seed %d: random ties gave %v then %v", seed, a.Placements[0], b.Placements[0])
		}
		seen[snap.TypeOf(a.Placements[0])]++
	}
	if seen["slow"] == 0 || seen["fast"] == 0 {
		t.Errorf("random ties over 40 seeds: %v, want both types", seen)
	}
}

// Pollux blind to types sees the 8-GPU node as two 4-GPU ones and never
// leaves a job on two types.
func TestPolluxUnawareRound(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: hetNodes(), Seed: 3}
	for i := 0; i < 4; i++ {
		snap.Jobs = append(snap.Jobs, optimizer.Job{ID: string(rune('a' + i)), Age: 600, MaxReplicas: 8, Model: fittedModel()})
	}
	pol := optimizer.NewPolluxUnaware()
	var prev *optimizer.State
	for round := 0; round < 3; round++ {
		res, err := pol.Allocate(snap, prev)
		if err != nil {
			t.Fatal(err)
		}
		checkTyped(t, snap, res)
		if res.State == nil || len(res.State.NodeIDs) != 3 {
			t.Fatalf("virtual cluster of %v nodes, want 3", res.State)
		}
		for j := range snap.Jobs {
			snap.Jobs[j].Current = res.Placements[j]
		}
		prev = res.State
	}
}

// pollux-het uses every GPU type, gives every job GPUs when there are
// enough, and keeps a job whose type and count stay where it is.
func TestHetPolluxRound(t *testing.T) {
	snap := &optimizer.Snapshot{Nodes: hetNodes()}
	for i := 0; i < 3; i++ {
		snap.Jobs = append(snap.Jobs, optimizer.Job{ID: string(rune('a' + i)), Age: 3600, MaxReplicas: 8,
			TypeModels:     map[string]*goodput.Model{"slow": fittedModel(), "fast": fittedModel()},
			TypeThroughput: map[string]float64{"slow": 100, "fast": 400}})
	}
	pol := optimizer.NewHetPollux()
	res, err := pol.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTyped(t, snap, res)
	types := map[string]bool{}
	for j, p := range res.Placements {
		if len(p) == 0 {
			t.Errorf("job %d got no GPUs", j)
		}
		types[snap.TypeOf(p)] = true
	}
	if !types["slow"] || !types["fast"] {
		t.Errorf("types used %v, want both", types)
	}
	for j := range snap.Jobs {
		snap.Jobs[j].Current = res.Placements[j]
	}
	again, err := pol.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	for j := range snap.Jobs {
		if !again.Placements[j].Equal(res.Placements[j]) {
			t.Errorf("job %d moved from %v to %v with nothing changed", j, res.Placements[j], again.Placements[j])
		}
	}
}
