package control

import (
	"testing"

	"pollux/consensus"
	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

var limits = goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 32, MaxLocal: 512, Accumulation: true}

func testState() *consensus.State {
	st := &consensus.State{
		Jobs: map[string]*consensus.Job{
			"a": {ID: "a", State: consensus.Running, Incarnation: 3, SubmitTime: 100, Attained: 50,
				Spec: consensus.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: limits}},
			"b": {ID: "b", State: consensus.Pending, Incarnation: 1, SubmitTime: 150,
				Spec: consensus.JobSpec{Command: []string{"train"}, MinReplicas: 1, MaxReplicas: 2, Limits: limits, CheckpointDir: "/ck/b"}},
			"done": {ID: "done", State: consensus.Completed, Spec: consensus.JobSpec{App: "x", MinReplicas: 1, MaxReplicas: 1, Limits: limits}},
		},
		Nodes: map[string]*consensus.Node{
			"n1":   {ID: "n1", GPUs: 4, Health: consensus.Alive, Addresses: []string{"10.0.0.1:7000"}},
			"n2":   {ID: "n2", GPUs: 4, Health: consensus.Alive, Addresses: []string{"10.0.0.2:7000"}},
			"dead": {ID: "dead", GPUs: 4, Health: consensus.Dead, Addresses: []string{"10.0.0.3:7000"}},
		},
		Allocation: consensus.Allocation{Generation: 7, Term: 2, Jobs: map[string][]consensus.Slot{
			"a": {{Node: "dead", GPUs: 1}, {Node: "n1", GPUs: 2}, {Node: "n2", GPUs: 1}},
		}},
	}
	return st
}

func TestBuildSnapshot(t *testing.T) {
	snap, err := BuildSnapshot(testState(), NewModels(), 200, 10, 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Nodes) != 2 || snap.Nodes[0].ID != "n1" || snap.Nodes[1].ID != "n2" {
		t.Fatalf("nodes %+v", snap.Nodes)
	}
	if len(snap.Jobs) != 2 || snap.Jobs[0].ID != "a" || snap.Jobs[1].ID != "b" {
		t.Fatalf("jobs %+v", snap.Jobs)
	}
	a := snap.Jobs[0]
	want := optimizer.Placement{{Node: 0, Count: 2}, {Node: 1, Count: 1}} // the dead node's slot dropped
	if !a.Current.Equal(want) || a.Age != 1000 || a.Attained != 50 || a.Model != nil || a.MaxReplicas != 1 {
		t.Errorf("job a %+v", a)
	}
	if snap.Seed != 42 || snap.Now != 200 {
		t.Errorf("seed %d now %v", snap.Seed, snap.Now)
	}
	excl, _ := BuildSnapshot(testState(), NewModels(), 200, 1, 1, map[string]bool{"a": true})
	if len(excl.Jobs) != 1 || excl.Jobs[0].ID != "b" {
		t.Errorf("excluded snapshot jobs %+v", excl.Jobs)
	}
}

func TestMaxReplicasDoublesProfiled(t *testing.T) {
	tests := []struct {
		profiled, specMax, want int
	}{
		{0, 8, 1}, {1, 8, 2}, {3, 8, 6}, {5, 8, 8}, {40, 100, 64},
	}
	for _, tc := range tests {
		j := &consensus.Job{Spec: consensus.JobSpec{MinReplicas: 1, MaxReplicas: tc.specMax, Limits: goodput.Limits{InitBatch: 128, MaxBatch: 1 << 20, MinLocal: 1, MaxLocal: 512}}}
		if tc.profiled > 0 {
			j.Profile = []consensus.ProfileEntry{{ProfilePoint: goodput.ProfilePoint{Nodes: 1, Replicas: tc.profiled, LocalBatch: 32, AccumTime: 1, StepTime: 1}, Count: 1}}
		}
		if got := maxReplicas(j); got != tc.want {
			t.Errorf("profiled %d, spec max %d: %d, want %d", tc.profiled, tc.specMax, got, tc.want)
		}
	}
}

func TestModelsFitAndCache(t *testing.T) {
	truth := goodput.Params{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.1, BetaR: 0.005, Gamma: 1.5}
	j := testState().Jobs["a"]
	for _, pt := range [][3]int{{1, 1, 64}, {1, 1, 256}, {1, 2, 128}, {1, 4, 128}, {2, 4, 128}} {
		n, k, m := pt[0], pt[1], pt[2]
		step := truth.SyncTime(n, k, float64(m))
		j.Profile = append(j.Profile, consensus.ProfileEntry{ProfilePoint: goodput.ProfilePoint{
			Nodes: n, Replicas: k, LocalBatch: m, AccumTime: truth.AccumTime(float64(m)), StepTime: step}, Count: 1})
	}
	ms := NewModels()
	m := ms.Model(j)
	if m == nil {
		t.Fatal("no model from a full profile")
	}
	if got, want := m.Params.SyncTime(2, 4, 128), truth.SyncTime(2, 4, 128); got < want*0.9 || got > want*1.1 {
		t.Errorf("fitted sync time %v, truth %v", got, want)
	}
	if again := ms.Model(j); again.Params != m.Params {
		t.Error("cached model differs")
	}
	ms.Forget(map[string]*consensus.Job{})
	if len(ms.byJob) != 0 {
		t.Error("Forget kept a model")
	}
}

func TestAssignments(t *testing.T) {
	st := testState()
	st.Allocation.Jobs["b"] = []consensus.Slot{{Node: "n2", GPUs: 2}}
	as := Assignments(st, AssignOptions{CheckpointRoot: "/root"})
	if len(as) != 2 || as["dead"] != nil {
		t.Fatalf("assignments for %v", as)
	}
	n1, n2 := as["n1"], as["n2"]
	if n1.Generation != 7 || n1.Term != 2 || len(n1.Runs) != 1 || len(n2.Runs) != 2 {
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
	// No model: default split of max(M0, m_min*K) = max(128, 32*4) = 128 over 4.
	if a1.AtomicBatch != 32 || a1.AccumSteps != 0 || a1.Gain != 1 || a1.InitBatch != 128 {
		t.Errorf("batch of a: %v", a1)
	}
	b := n2.Runs[1]
	if b.Job != "b" || b.Command[0] != "train" || b.CheckpointDir != "/ck/b" || b.AtomicBatch != 64 || b.MasterAddr != "10.0.0.2" {
		t.Errorf("run of b: %v", b)
	}
}

func TestBatchConfigUsesModel(t *testing.T) {
	j := testState().Jobs["a"]
	j.Grad, j.HasGrad = goodput.GradStats{GradSqr: 1, GradVar: 1000}, true
	model := &goodput.Model{Params: goodput.Params{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.1, BetaR: 0.005, Gamma: 1.5},
		Grad: j.Grad, Limits: limits}
	cfg, err := model.Optimize(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	m, s, gain := BatchConfig(j, model, 1, 4)
	if m != cfg.LocalBatch || s != cfg.AccumSteps || gain != cfg.Gain || m*4*(s+1) == limits.InitBatch {
		t.Errorf("BatchConfig = %d, %d, %v; model says %+v", m, s, gain, cfg)
	}
}
