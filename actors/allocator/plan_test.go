package allocator

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pollux/actors/node/workerproto"
	"pollux/consensus/state"
	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

var limits = goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512, Accumulation: true}

var params = goodput.Params{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.1, BetaR: 0.005, Gamma: 1.5}

// bidOfTable is a bid with a model whose table gives local batch 32*k
// (single node) and 16*k (several nodes) on k replicas.
func bidOfTable(k int, most int) state.Bid {
	b := state.Bid{Session: 1, Version: 1, HasModel: true, Params: params, MostProfiled: most}
	for i := 1; i <= k; i++ {
		b.Single = append(b.Single, state.BatchChoice{LocalBatch: 32 * i, Gain: 1})
		b.Multi = append(b.Multi, state.BatchChoice{LocalBatch: 16 * i, AccumSteps: 1, Gain: 1.5})
	}
	return b
}

func testState() *state.State {
	st := &state.State{
		Config: state.ClusterConfig{ID: "c1", CheckpointRoot: "/root", ReportKey: strings.Repeat("5", state.ReportKeyLen)},
		Jobs: map[string]*state.Job{
			"a": {ID: "a", State: state.Running, Incarnation: 3, SubmitTime: 100, Attained: 50, Epoch: 30,
				Spec: state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: limits, Epochs: 120}, Bid: bidOfTable(8, 2)},
			"b": {ID: "b", State: state.Pending, Incarnation: 1, SubmitTime: 150, Bid: bidOfTable(2, 0),
				Spec: state.JobSpec{Command: []string{"train"}, MinReplicas: 1, MaxReplicas: 2, Limits: limits, CheckpointDir: "/ck/b"}},
			"nobid": {ID: "nobid", State: state.Pending, SubmitTime: 160, Spec: state.JobSpec{App: "x", MinReplicas: 1, MaxReplicas: 1, Limits: limits}},
			"done":  {ID: "done", State: state.Completed, Spec: state.JobSpec{App: "x", MinReplicas: 1, MaxReplicas: 1, Limits: limits}},
		},
		Nodes: map[string]*state.Node{
			"n1":   {ID: "n1", GPUs: 4, Health: state.Alive, Addresses: []string{"10.0.0.1:7000"}},
			"n2":   {ID: "n2", GPUs: 4, Health: state.Alive, Addresses: []string{"10.0.0.2:7000"}},
			"dead": {ID: "dead", GPUs: 4, Health: state.Dead, Addresses: []string{"10.0.0.3:7000"}},
		},
		Allocation: state.Allocation{Generation: 7, Term: 2, Jobs: map[string][]state.Slot{
			"a": {{Node: "dead", GPUs: 1}, {Node: "n1", GPUs: 2}, {Node: "n2", GPUs: 1}},
		}},
	}
	st.Jobs["b"].Bid.HasModel = false
	return st
}

func TestBuildSnapshotFromBids(t *testing.T) {
	st := testState()
	snap, err := BuildSnapshot(st, nil, 200, 10, 42)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Nodes) != 2 || snap.Nodes[0].ID != "n1" || snap.Nodes[1].ID != "n2" {
		t.Fatalf("nodes %+v", snap.Nodes)
	}
	// The job that has not bid is left out.
	if len(snap.Jobs) != 2 || snap.Jobs[0].ID != "a" || snap.Jobs[1].ID != "b" {
		t.Fatalf("jobs %+v", snap.Jobs)
	}
	a, b := snap.Jobs[0], snap.Jobs[1]
	want := optimizer.Placement{{Node: 0, Count: 2}, {Node: 1, Count: 1}} // the dead node's slot dropped
	if !a.Current.Equal(want) || a.Age != 1000 || a.Attained != 50 || a.MaxReplicas != 4 {
		t.Errorf("job a %+v", a)
	}
	// a declared 120 epochs and reported 30; b declared none.
	if a.Progress != 0.25 || b.Progress != 0 {
		t.Errorf("progress of a %v, of b %v: want 0.25 and 0", a.Progress, b.Progress)
	}
	if a.Model == nil || a.Model.Params != params || a.Model.Limits != limits {
		t.Errorf("job a's model %+v is not its bid's", a.Model)
	}
	if b.Model != nil || b.MaxReplicas != 1 {
		t.Errorf("job b (bid without a model) %+v", b)
	}
	// A newer bid received this round overrides the replicated one.
	newer := bidOfTable(8, 4)
	newer.Params.AlphaC = 0.5
	newer.RestartDelay = 6
	snap, _ = BuildSnapshot(st, map[string]*state.Bid{"a": &newer, "nobid": &newer}, 200, 10, 42)
	if len(snap.Jobs) != 3 || snap.Jobs[0].Model.Params.AlphaC != 0.5 || snap.Jobs[0].MaxReplicas != 8 {
		t.Errorf("with newer bids: %+v", snap.Jobs)
	}
	// The measured restart delay is weighed on the clock of job ages
	// (real seconds times the time scale); b has measured none.
	if a, b := snap.Jobs[0], snap.Jobs[1]; a.RestartDelay != 60 || b.RestartDelay != 0 {
		t.Errorf("restart delays %v and %v, want 60 (6 s at time scale 10) and 0", a.RestartDelay, b.RestartDelay)
	}
	if snap.Seed != 42 || snap.Now != 200 {
		t.Errorf("seed %d now %v", snap.Seed, snap.Now)
	}
}

func TestMaxReplicasDoublesProfiled(t *testing.T) {
	tests := []struct {
		profiled, specMax, table, want int
	}{
		{0, 8, 64, 1}, {1, 8, 64, 2}, {3, 8, 64, 6}, {5, 8, 64, 8}, {40, 100, 64, 64}, {40, 100, 16, 16},
	}
	for _, tc := range tests {
		spec := state.JobSpec{MinReplicas: 1, MaxReplicas: tc.specMax, Limits: goodput.Limits{InitBatch: 128, MaxBatch: 1 << 20, MinLocal: 1, MaxLocal: 512}}
		b := bidOfTable(tc.table, tc.profiled)
		if got := maxReplicas(spec, &b); got != tc.want {
			t.Errorf("profiled %d, spec max %d, table %d: %d, want %d", tc.profiled, tc.specMax, tc.table, got, tc.want)
		}
	}
}

func TestAssignmentsRunTheBidsChoices(t *testing.T) {
	st := testState()
	st.Allocation.Jobs["b"] = []state.Slot{{Node: "n2", GPUs: 2}}
	as, uncovered := Assignments(st, AssignOptions{Term: 5})
	if len(as) != 2 || as["dead"] != nil || len(uncovered) != 0 {
		t.Fatalf("assignments for %v, uncovered %v", as, uncovered)
	}
	n1, n2 := as["n1"], as["n2"]
	if n1.Generation != 7 || n1.Term != 5 || n1.ClusterId != "c1" || len(n1.Runs) != 1 || len(n2.Runs) != 2 {
		t.Fatalf("n1 %v\nn2 %v", n1, n2)
	}
	a1, a2 := n1.Runs[0], n2.Runs[0]
	// Job a: 4 replicas over 3 nodes; the dead node's rank 0 is skipped.
	if a1.FirstRank != 1 || a1.Replicas != 2 || a2.FirstRank != 3 || a1.WorldSize != 4 || a1.NumNodes != 3 {
		t.Errorf("ranks of a: %v / %v", a1, a2)
	}
	if a1.Incarnation != 3 || a1.Application != "cifar10" || a1.CheckpointDir != "/root/a" || a1.MasterAddr != "10.0.0.1" {
		t.Errorf("run of a: %v", a1)
	}
	// Each node gets the report tokens of its own ranks, and the root.
	key := []byte(st.Config.ReportKey)
	if !slices.Equal(a1.ReportTokens, []string{workerproto.ReportToken(key, "a", 3, 1), workerproto.ReportToken(key, "a", 3, 2)}) ||
		!slices.Equal(a2.ReportTokens, []string{workerproto.ReportToken(key, "a", 3, 3)}) || n1.CheckpointRoot != "/root" {
		t.Errorf("tokens of a: %q / %q, root %q", a1.ReportTokens, a2.ReportTokens, n1.CheckpointRoot)
	}
	// Several nodes, 4 replicas: the bid's multi-node choice for K=4.
	if a1.AtomicBatch != 64 || a1.AccumSteps != 1 || a1.Gain != 1.5 || a1.InitBatch != 128 {
		t.Errorf("batch of a: %v", a1)
	}
	// One node, 2 replicas: the single-node choice for K=2.
	b := n2.Runs[1]
	if b.Job != "b" || b.Command[0] != "train" || b.CheckpointDir != "/ck/b" || b.AtomicBatch != 64 || b.AccumSteps != 0 || b.MasterAddr != "10.0.0.2" {
		t.Errorf("run of b: %v", b)
	}
	// A placement the bid does not cover is not run.
	st.Allocation.Jobs["b"] = []state.Slot{{Node: "n1", GPUs: 1}, {Node: "n2", GPUs: 2}}
	if _, uncovered := Assignments(st, AssignOptions{}); len(uncovered) != 1 || uncovered[0] != "b" {
		t.Errorf("uncovered %v", uncovered)
	}
}

func TestPlaceSpreadsAndMovesLittle(t *testing.T) {
	servers := []string{"s0", "s1", "s2"}
	count := map[string]int{}
	before := map[string]string{}
	for i := range 3000 {
		id := fmt.Sprintf("job-%d", i)
		s := Place(id, servers)
		count[s]++
		before[id] = s
	}
	for _, s := range servers {
		if math.Abs(float64(count[s])-1000) > 100 {
			t.Errorf("server %s hosts %d of 3000 jobs", s, count[s])
		}
	}
	// s1 dies: only its jobs move.
	moved := 0
	for id, s := range before {
		now := Place(id, []string{"s0", "s2"})
		if s != "s1" && now != s {
			t.Fatalf("job %s moved from %s to %s though its server lives", id, s, now)
		}
		if s == "s1" {
			moved++
		}
	}
	if moved != count["s1"] || Place("x", nil) != "" {
		t.Errorf("moved %d", moved)
	}
}

// TestAllocatorNeverFits: the allocator consumes bids; fitting is the job
// actors' (package job). No non-test file of this package calls the fit.
func TestAllocatorNeverFits(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "goodput" && (sel.Sel.Name == "Fit" || sel.Sel.Name == "Refit") {
					t.Errorf("%s: the allocator calls goodput.%s", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		for _, imp := range file.Imports {
			if imp.Path.Value == `"pollux/actors/job"` {
				t.Errorf("%s imports the job actors' package", f)
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked only %d files", checked)
	}
}

// TestTiresiasRunsUserSizedJobs checks that a snapshot gives Tiresias
// each job's user-sized replica count and that it runs them first come
// first served, unresized.
func TestTiresiasRunsUserSizedJobs(t *testing.T) {
	fixed := func(k int) state.JobSpec {
		m := 256 / k
		return state.JobSpec{App: "x", MinReplicas: k, MaxReplicas: k,
			Limits: goodput.Limits{InitBatch: 128, MaxBatch: 256, MinLocal: m, MaxLocal: m}}
	}
	st := testState()
	st.Jobs = map[string]*state.Job{
		"first":  {ID: "first", State: state.Running, SubmitTime: 10, Attained: 600, Spec: fixed(4), Bid: bidOfTable(4, 1)},
		"second": {ID: "second", State: state.Pending, SubmitTime: 20, Spec: fixed(8), Bid: bidOfTable(8, 0)},
		"third":  {ID: "third", State: state.Pending, SubmitTime: 30, Spec: fixed(2), Bid: bidOfTable(2, 0)},
	}
	st.Allocation.Jobs = map[string][]state.Slot{"first": {{Node: "n1", GPUs: 4}}}
	snap, err := BuildSnapshot(st, nil, 100, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		replicas int
		executed float64 // attained GPU-seconds over the replicas
	}{{4, 150}, {8, 0}, {2, 0}} {
		if j := snap.Jobs[i]; j.Replicas != want.replicas || j.Executed != want.executed {
			t.Errorf("job %s: replicas %d executed %v, want %+v", j.ID, j.Replicas, j.Executed, want)
		}
	}
	res, err := optimizer.Tiresias{}.Allocate(snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 8 slots: first keeps its 4, second (8) does not fit, third takes 2.
	got := []int{res.Placements[0].Replicas(), res.Placements[1].Replicas(), res.Placements[2].Replicas()}
	if !slices.Equal(got, []int{4, 0, 2}) || !res.Placements[0].Equal(snap.Jobs[0].Current) {
		t.Errorf("replicas %v (first at %v, was %v), want [4 0 2] with first unmoved", got, res.Placements[0], snap.Jobs[0].Current)
	}
}
