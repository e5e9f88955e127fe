package optimizer_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

func TestCheckRequired(t *testing.T) {
	nodes := []optimizer.Node{
		{ID: "a", GPUs: 8, Topology: []string{"r1", "z1"}},
		{ID: "b", GPUs: 8, Topology: []string{"r1", "z1"}},
		{ID: "c", GPUs: 8, Topology: []string{"r2", "z1"}},
		{ID: "d", GPUs: 4, Topology: []string{"r1", "z2"}}, // another rack r1, in z2
	}
	levels := []string{"rack", "zone"}
	for _, c := range []struct {
		c    optimizer.TopologyConstraint
		min  int
		want error
	}{
		{optimizer.TopologyConstraint{}, 100, nil},
		{optimizer.TopologyConstraint{Preferred: "rack"}, 100, nil},
		{optimizer.TopologyConstraint{Required: "rack"}, 16, nil},
		{optimizer.TopologyConstraint{Required: "rack"}, 17, optimizer.ErrUnsatisfiable},
		{optimizer.TopologyConstraint{Required: "zone"}, 24, nil},
		{optimizer.TopologyConstraint{Required: "zone"}, 25, optimizer.ErrUnsatisfiable},
		{optimizer.TopologyConstraint{Required: "row"}, 1, optimizer.ErrBadTopology},
		{optimizer.TopologyConstraint{Required: "rack", Preferred: "zone"}, 1, optimizer.ErrBadTopology},
	} {
		err := optimizer.CheckRequired(nodes, levels, c.c, c.min)
		if !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("CheckRequired(%+v, %d) = %v, want %v", c.c, c.min, err, c.want)
		}
	}
	err := optimizer.CheckRequired(nodes, levels, optimizer.TopologyConstraint{Required: "rack"}, 17)
	if err == nil || !strings.Contains(err.Error(), "has 16") || !strings.Contains(err.Error(), "r1 in z1") {
		t.Errorf("unclear error: %v", err)
	}
	// Nodes without a topology are all in the default rack.
	plain := []optimizer.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 4}}
	if err := optimizer.CheckRequired(plain, nil, optimizer.TopologyConstraint{Required: "rack"}, 8); err != nil {
		t.Errorf("default rack of 8 GPUs: %v", err)
	}
}

// CheckPlacement: a job's GPU type and required level, the same rack
// name in two zones being two racks; a job without a type may span types.
func TestCheckPlacement(t *testing.T) {
	a := optimizer.Node{ID: "a", GPUs: 8, Type: "a100", Topology: []string{"r1", "z1"}}
	b := optimizer.Node{ID: "b", GPUs: 8, Type: "a100", Topology: []string{"r1", "z1"}}
	c := optimizer.Node{ID: "c", GPUs: 8, Type: "t4", Topology: []string{"r1", "z1"}}
	d := optimizer.Node{ID: "d", GPUs: 8, Type: "a100", Topology: []string{"r1", "z2"}} // another r1
	levels := []string{"rack", "zone"}
	rack := optimizer.TopologyConstraint{Required: "rack"}
	zone := optimizer.TopologyConstraint{Required: "zone"}
	for _, tt := range []struct {
		nodes   []optimizer.Node
		gpuType string
		c       optimizer.TopologyConstraint
		want    error
	}{
		{[]optimizer.Node{a, b}, "a100", rack, nil},
		{[]optimizer.Node{a, c}, "", rack, nil},
		{[]optimizer.Node{a, c}, "a100", optimizer.TopologyConstraint{}, optimizer.ErrForbidden},
		{[]optimizer.Node{a, d}, "", rack, optimizer.ErrForbidden},
		{[]optimizer.Node{a, d}, "", zone, optimizer.ErrForbidden},
		{[]optimizer.Node{a, b, c}, "", zone, nil},
		{[]optimizer.Node{a, d}, "", optimizer.TopologyConstraint{Preferred: "rack"}, nil},
		{[]optimizer.Node{a}, "", optimizer.TopologyConstraint{Required: "row"}, optimizer.ErrBadTopology},
		{nil, "a100", rack, nil},
	} {
		err := optimizer.CheckPlacement(tt.nodes, levels, tt.gpuType, tt.c)
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
			t.Errorf("CheckPlacement(%v, %q, %+v) = %v, want %v", tt.nodes, tt.gpuType, tt.c, err, tt.want)
		}
	}
	// Untyped nodes without a topology: one default rack, no type.
	plain := []optimizer.Node{{ID: "x", GPUs: 4}, {ID: "y", GPUs: 4}}
	if err := optimizer.CheckPlacement(plain, nil, "", rack); err != nil {
		t.Errorf("default rack: %v", err)
	}
	if err := optimizer.CheckPlacement(plain, nil, "t4", rack); err == nil || !strings.Contains(err.Error(), "node x has untyped GPUs, the job runs on t4") {
		t.Errorf("untyped nodes for a t4 job: %v", err)
	}
}

func TestSnapshotTopologyRefused(t *testing.T) {
	base := func() *optimizer.Snapshot {
		return &optimizer.Snapshot{
			Nodes:  []optimizer.Node{{ID: "a", GPUs: 4, Topology: []string{"r1", "z1"}}, {ID: "b", GPUs: 4}},
			Levels: []string{"rack", "zone"},
			Jobs:   []optimizer.Job{{ID: "j", Age: 60, MaxReplicas: 4}},
		}
	}
	for name, mod := range map[string]func(*optimizer.Snapshot){
		"too many levels": func(s *optimizer.Snapshot) { s.Nodes[0].Topology = []string{"r1", "z1", "x"} },
		"bad domain":      func(s *optimizer.Snapshot) { s.Nodes[0].Topology = []string{"R 1"} },
		"bad levels":      func(s *optimizer.Snapshot) { s.Levels = []string{"zone", "rack"} },
		"unknown level":   func(s *optimizer.Snapshot) { s.Jobs[0].Topology.Required = "row" },
		"required+preferred": func(s *optimizer.Snapshot) {
			s.Jobs[0].Topology = optimizer.TopologyConstraint{Required: "rack", Preferred: "zone"}
		},
	} {
		snap := base()
		mod(snap)
		for _, p := range []optimizer.Policy{optimizer.NewPollux(), optimizer.NewHetPollux(), optimizer.Tiresias{}} {
			if _, err := p.Allocate(snap, nil); !errors.Is(err, optimizer.ErrBadSnapshot) {
				t.Errorf("%s, %s: %v, want ErrBadSnapshot", name, p.Name(), err)
			}
		}
	}
	if _, err := optimizer.NewPollux().Allocate(base(), nil); err != nil {
		t.Errorf("valid snapshot: %v", err)
	}
}

// TestOneRackTopologyUnchanged: naming the one rack, adding levels above
// it or fitted cross-rack terms changes no allocation of any policy.
func TestOneRackTopologyUnchanged(t *testing.T) {
	want := oneRackCases(t, func(*optimizer.Snapshot) {})
	got := oneRackCases(t, func(s *optimizer.Snapshot) {
		s.Levels = []string{"rack", "zone"}
		withCrossRack(s, 3)
		for n := range s.Nodes {
			s.Nodes[n].Topology = []string{"r7", "z2"}
		}
	})
	compareDigests(t, want, got)
}

// withCrossRack gives every job with a model of snap a fitted cross-rack
// term of x times its inter-node alpha.
func withCrossRack(snap *optimizer.Snapshot, x float64) {
	for j := range snap.Jobs {
		if md := snap.Jobs[j].Model; md != nil {
			c := *md
			c.Params.AlphaX = x * c.Params.AlphaN
			snap.Jobs[j].Model = &c
		}
	}
}

// rackedSnapshot is randomSnapshot on 2 to 6 racks (zones of 2 racks),
// with fitted cross-rack terms of 0 to 7 times the inter-node alpha and
// about a third of the jobs constrained: required or preferred, at the
// rack or the zone.
func rackedSnapshot(t testing.TB, seed uint64) *optimizer.Snapshot {
	t.Helper()
	snap := randomSnapshot(t, seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	racks := min(2+rng.IntN(5), len(snap.Nodes))
	if err := optimizer.AssignRacks(snap, racks); err != nil {
		t.Fatal(err)
	}
	snap.Levels = []string{"rack", "zone"}
	for n := range snap.Nodes {
		r := snap.Nodes[n].Topology[0]
		var idx int
		fmt.Sscanf(r, "rack-%d", &idx)
		snap.Nodes[n].Topology = append(snap.Nodes[n].Topology, fmt.Sprintf("z%d", idx/2))
	}
	withCrossRack(snap, 7*rng.Float64())
	for j := range snap.Jobs {
		switch rng.IntN(9) {
		case 0:
			snap.Jobs[j].Topology.Required = "rack"
		case 1:
			snap.Jobs[j].Topology.Required = "zone"
		case 2:
			snap.Jobs[j].Topology.Preferred = "rack"
		}
	}
	return snap
}

// checkRequired fails on a placement that breaks its job's required
// topology: seen by comparing the domain names of its nodes.
func checkRequired(t *testing.T, snap *optimizer.Snapshot, alloc []optimizer.Placement, what string) {
	t.Helper()
	levels := snap.Levels
	if len(levels) == 0 {
		levels = []string{"rack"}
	}
	for j, pl := range alloc {
		req := snap.Jobs[j].Topology.Required
		if req == "" || len(pl) < 2 {
			continue
		}
		at := -1
		for i, l := range levels {
			if l == req {
				at = i
			}
		}
		domain := func(n int) string { return strings.Join(snap.Nodes[n].Topology[at:], "/") }
		for _, nc := range pl[1:] {
			if domain(nc.Node) != domain(pl[0].Node) {
				t.Fatalf("%s: job %s requires one %s and got %v (%s and %s)", what, snap.Jobs[j].ID, req, pl, domain(pl[0].Node), domain(nc.Node))
			}
		}
	}
}

// TestRequiredNeverViolated: over random multi-rack rounds, each warm
// started from the previous one (whose allocation becomes the current
// one), no policy ever places a job across the domains of its required
// level, and every allocation stays feasible.
func TestRequiredNeverViolated(t *testing.T) {
	for seed := range uint64(30) {
		snap := rackedSnapshot(t, seed)
		hier := smallPollux(2)
		hier.Hierarchy = optimizer.HierarchyRacks
		policies := []optimizer.Policy{smallPollux(2), hier, optimizer.NewHetPollux(), optimizer.NewSia(), optimizer.Tiresias{}, optimizer.Optimus{}, optimizer.NewGreedy()}
		for _, p := range policies {
			cur := *snap
			cur.Jobs = append([]optimizer.Job(nil), snap.Jobs...)
			var prev *optimizer.State
			for round := range 4 {
				res, err := p.Allocate(&cur, prev)
				if err != nil {
					t.Fatalf("seed %d %s round %d: %v", seed, p.Name(), round, err)
				}
				what := fmt.Sprintf("seed %d %s round %d", seed, p.Name(), round)
				checkRequired(t, &cur, res.Placements, what)
				if p.Name() == "pollux" || p.Name() == "greedy" {
					checkFeasible(t, &cur, res.Placements, func(j int) (int, int) {
						return cur.Jobs[j].MinReplicas, cur.Jobs[j].MaxReplicas
					})
				}
				prev = res.State
				cur.Seed++
				for j := range cur.Jobs {
					cur.Jobs[j].Current = res.Placements[j]
					cur.Jobs[j].Age += 60
				}
			}
		}
	}
}

// twoRacks is 2 racks of 2 nodes of 4 GPUs.
func twoRacks() []optimizer.Node {
	return []optimizer.Node{
		{ID: "a", GPUs: 4, Topology: []string{"r1"}}, {ID: "b", GPUs: 4, Topology: []string{"r1"}},
		{ID: "c", GPUs: 4, Topology: []string{"r2"}}, {ID: "d", GPUs: 4, Topology: []string{"r2"}},
	}
}

// commModel is a job whose synchronisation is a large part of its step.
func commModel() *goodput.Model {
	return &goodput.Model{
		Params: goodput.Params{AlphaC: 0.05, BetaC: 0.001, AlphaN: 0.1, BetaN: 0.01, AlphaR: 0.02, BetaR: 0.002, Gamma: 1.5},
		Grad:   goodput.GradStats{GradSqr: 1, GradVar: 200},
		Limits: goodput.Limits{InitBatch: 32, MaxBatch: 4096, MinLocal: 8, MaxLocal: 128, Accumulation: true},
	}
}

// crossModel is commModel with a fitted cross-rack term of x seconds per
// synchronisation across two racks.
func crossModel(x float64) *goodput.Model {
	md := commModel()
	md.Params.AlphaX = x
	return md
}

// The objective prices a placement across racks by the job's fitted
// cross-rack term, more the more racks it spans; without one (nothing
// measured across racks) racks are free.
func TestObjectivePricesRacks(t *testing.T) {
	across := optimizer.Placement{{Node: 1, Count: 4}, {Node: 2, Count: 4}}
	within := optimizer.Placement{{Node: 0, Count: 4}, {Node: 1, Count: 4}}
	scaled := func(nodes []optimizer.Node, md *goodput.Model, pl optimizer.Placement) float64 {
		snap := &optimizer.Snapshot{Nodes: nodes, Jobs: []optimizer.Job{{ID: "j", Age: 600, MaxReplicas: 16, Model: md}}}
		obj, err := optimizer.NewObjective(snap, optimizer.DefaultPowerMean)
		if err != nil {
			t.Fatal(err)
		}
		return obj.Scaled(0, pl)
	}
	plain := twoRacks()
	for n := range plain {
		plain[n].Topology = nil
	}
	blind := scaled(plain, commModel(), across)
	if got := scaled(twoRacks(), commModel(), across); got != blind {
		t.Errorf("no fitted term: %v, rack-blind %v", got, blind)
	}
	x := scaled(twoRacks(), crossModel(0.3), across)
	if !(x < 0.9*blind) {
		t.Errorf("fitted 0.3 s: %v, not well below the rack-blind %v", x, blind)
	}
	if got := scaled(twoRacks(), crossModel(0.3), within); got != blind {
		t.Errorf("within one rack: %v, want the rack-blind %v", got, blind)
	}
	if y := scaled(twoRacks(), crossModel(0.6), across); !(y < x) {
		t.Errorf("a larger fitted term costs no more: %v vs %v", y, x)
	}
	// Four racks of one node each: spanning all four costs more than two.
	four := []optimizer.Node{
		{ID: "a", GPUs: 4, Topology: []string{"r1"}}, {ID: "b", GPUs: 4, Topology: []string{"r2"}},
		{ID: "c", GPUs: 4, Topology: []string{"r3"}}, {ID: "d", GPUs: 4, Topology: []string{"r4"}},
	}
	two := scaled(four, crossModel(0.3), optimizer.Placement{{Node: 0, Count: 4}, {Node: 1, Count: 4}})
	all := scaled(four, crossModel(0.3), optimizer.Placement{{Node: 0, Count: 2}, {Node: 1, Count: 2}, {Node: 2, Count: 2}, {Node: 3, Count: 2}})
	flat := scaled(plain, crossModel(0.3), optimizer.Placement{{Node: 0, Count: 2}, {Node: 1, Count: 2}, {Node: 2, Count: 2}, {Node: 3, Count: 2}})
	if two != x || !(all < flat) {
		t.Errorf("4 racks: two racks %v (want %v), four racks %v vs %v in one", two, x, all, flat)
	}
}

// With a costly fitted cross-rack term the search keeps a job within one
// rack when it fits there.
func TestSearchKeepsJobInOneRack(t *testing.T) {
	for seed := range uint64(10) {
		snap := &optimizer.Snapshot{Nodes: twoRacks(), Seed: seed, Jobs: []optimizer.Job{
			{ID: "j", Age: 6000, MaxReplicas: 8, Model: crossModel(0.3), Current: optimizer.Placement{{Node: 1, Count: 1}, {Node: 2, Count: 1}}},
			{ID: "k", Age: 6000, MaxReplicas: 4, Model: crossModel(0.3), Current: optimizer.Placement{{Node: 3, Count: 1}}},
		}}
		res, err := smallPollux(2).Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := snap.Racks(res.Placements[0]); r != 1 || res.Placements[0].Replicas() < 4 {
			t.Errorf("seed %d: job placed %v (%d racks)", seed, res.Placements[0], r)
		}
	}
}

// A preferred rack keeps a job within one rack when one holds it, even
// when racks cost nothing.
func TestPreferredRack(t *testing.T) {
	spans := func(pref string) int {
		n := 0
		for seed := range uint64(20) {
			snap := &optimizer.Snapshot{Nodes: twoRacks(), Seed: seed, Jobs: []optimizer.Job{
				{ID: "j", Age: 6000, MaxReplicas: 8, Model: commModel(), Topology: optimizer.TopologyConstraint{Preferred: pref},
					Current: optimizer.Placement{{Node: 1, Count: 1}, {Node: 2, Count: 1}}},
				{ID: "k", Age: 6000, MaxReplicas: 2, Model: commModel(), Current: optimizer.Placement{{Node: 3, Count: 2}}},
			}}
			res, err := smallPollux(2).Allocate(snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Racks(res.Placements[0]) > 1 && !res.Placements[0].Equal(snap.Jobs[0].Current) {
				n++
			}
		}
		return n
	}
	if n := spans("rack"); n > 0 {
		t.Errorf("a job preferring one rack was spread over racks in %d of 20 rounds", n)
	}
	if n := spans(""); n == 0 {
		t.Log("without the preference no round spread the job either: the check above is weak")
	}
}

// The search rack by rack gives the same allocation whatever the number
// of workers, is feasible, and beats the current allocation.
func TestHierarchicalSearch(t *testing.T) {
	snap, err := optimizer.Synthetic(1024, 8, 512, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := optimizer.AssignRacks(snap, 32); err != nil {
		t.Fatal(err)
	}
	withCrossRack(snap, 2)
	var first optimizer.Result
	for _, workers := range []int{1, 2} {
		p := optimizer.NewPollux()
		p.Workers = workers
		if !p.Hierarchical(snap) {
			t.Fatal("a round of 512 jobs on 32 racks is not searched rack by rack")
		}
		res, err := p.Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkFeasible(t, snap, res.Placements, func(j int) (int, int) { return snap.Jobs[j].MinReplicas, snap.Jobs[j].MaxReplicas })
		if !(res.Diagnostics.Fitness > res.Diagnostics.CurrentFitness) {
			t.Errorf("fitness %v, current %v", res.Diagnostics.Fitness, res.Diagnostics.CurrentFitness)
		}
		if workers == 1 {
			first = res
		} else if !reflect.DeepEqual(first.Placements, res.Placements) {
			t.Error("1 and 2 workers gave different allocations")
		}
	}
	// A warm-started next round keeps working.
	next := *snap
	next.Seed++
	res, err := optimizer.NewPollux().Allocate(&next, first.State)
	if err != nil {
		t.Fatal(err)
	}
	checkFeasible(t, &next, res.Placements, func(j int) (int, int) { return snap.Jobs[j].MinReplicas, snap.Jobs[j].MaxReplicas })
	// Flat on the same snapshot, for the record (the benchmark compares
	// them at scale).
	flat := optimizer.NewPollux()
	flat.Hierarchy = optimizer.HierarchyFlat
	if flat.Hierarchical(snap) {
		t.Error("HierarchyFlat searches rack by rack")
	}
	fr, err := flat.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first round: by rack %.5f, flat %.5f", first.Diagnostics.Fitness, fr.Diagnostics.Fitness)
}

// When a rack is lost, the next round re-places its jobs in the surviving
// racks (a required rack within one of them), warm-started from the
// population that still names the lost nodes.
func TestRackLossReplaced(t *testing.T) {
	snap, err := optimizer.Synthetic(96, 4, 24, 11)
	if err != nil {
		t.Fatal(err)
	}
	if err := optimizer.AssignRacks(snap, 3); err != nil {
		t.Fatal(err)
	}
	withCrossRack(snap, 3)
	for j := range snap.Jobs {
		snap.Jobs[j].Current = nil
		snap.Jobs[j].MaxReplicas = min(snap.Jobs[j].MaxReplicas, 4)
		if j%3 == 0 {
			snap.Jobs[j].Topology.Required = "rack"
		}
	}
	p := optimizer.NewPollux()
	res, err := p.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	lost := snap.Nodes[0].Topology[0]
	var onLost []string
	for j, pl := range res.Placements {
		for _, nc := range pl {
			if snap.Nodes[nc.Node].Topology[0] == lost {
				onLost = append(onLost, snap.Jobs[j].ID)
				break
			}
		}
	}
	if len(onLost) == 0 {
		t.Fatalf("no job on rack %s: nothing to re-place", lost)
	}
	// The next round: the rack's nodes are gone, and so are its replicas.
	next := *snap
	next.Seed++
	next.Nodes = nil
	index := map[int]int{}
	for n, node := range snap.Nodes {
		if node.Topology[0] != lost {
			index[n] = len(next.Nodes)
			next.Nodes = append(next.Nodes, node)
		}
	}
	next.Jobs = append([]optimizer.Job(nil), snap.Jobs...)
	for j := range next.Jobs {
		next.Jobs[j].Age += 60
		var cur optimizer.Placement
		for _, nc := range res.Placements[j] {
			if n, ok := index[nc.Node]; ok {
				cur = append(cur, optimizer.NodeCount{Node: n, Count: nc.Count})
			}
		}
		next.Jobs[j].Current = cur
	}
	again, err := p.Allocate(&next, res.State)
	if err != nil {
		t.Fatal(err)
	}
	checkFeasible(t, &next, again.Placements, func(j int) (int, int) { return next.Jobs[j].MinReplicas, next.Jobs[j].MaxReplicas })
	checkRequired(t, &next, again.Placements, "after the loss")
	for j, pl := range again.Placements {
		if len(pl) == 0 {
			t.Errorf("job %s has no GPUs after the loss (64 GPUs for 24 jobs of at most 4)", next.Jobs[j].ID)
		}
	}
}
