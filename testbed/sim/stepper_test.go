package sim

import (
	"context"
	"testing"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/workload"
)

// lastNodePolicy puts every job on one GPU of the last node.
type lastNodePolicy struct{}

func (lastNodePolicy) Name() string { return "last" }
func (lastNodePolicy) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	out := make([]optimizer.Placement, len(s.Jobs))
	for i := range out {
		out[i] = optimizer.Placement{{Node: len(s.Nodes) - 1, Count: 1}}
	}
	return optimizer.Result{Placements: out}, nil
}

// keepPolicy gives the first round's placement, then keeps every job where
// it is.
type keepPolicy struct{ first optimizer.Placement }

func (keepPolicy) Name() string { return "keep" }
func (k keepPolicy) Allocate(s *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	out := make([]optimizer.Placement, len(s.Jobs))
	for i, j := range s.Jobs {
		out[i] = j.Current
		if j.Restarts == 0 && len(j.Current) == 0 {
			out[i] = k.first
		}
	}
	return optimizer.Result{Placements: out}, nil
}

func toyStepper(t *testing.T, pol optimizer.Policy, replicas int) *Stepper {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Nodes = 2
	cat := testbed.TypedCatalog{"": testbed.Catalog{"toy": toyApp{epochs: 2}}}
	wl := workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", Time: 0, App: "toy", Replicas: replicas, Batch: 8 * replicas}}}
	st, err := NewStepper(cfg, cat, wl, pol, FixedBatch)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A job whose node leaves the cluster restarts once elsewhere, after its
// restart plus the time the node's previous workers take to leave.
func TestStepperMovesEvictedJob(t *testing.T) {
	st := toyStepper(t, lastNodePolicy{}, 1)
	step := func() {
		t.Helper()
		if err := st.Advance(); err != nil {
			t.Fatal(err)
		}
		if err := st.Allocate(); err != nil {
			t.Fatal(err)
		}
	}
	step() // t = 60: placed on node-1, restarting until 90.
	if u := st.Usage()["node-1"]; u.GPUs != 1 || u.Starting != 30 {
		t.Fatalf("usage %+v", st.Usage())
	}
	if err := st.Advance(); err != nil { // t = 120: 30 s of 120 trained.
		t.Fatal(err)
	}
	st.SetNodes([]optimizer.Node{{ID: "node-0", GPUs: 4}, {ID: "lab-b/n3", GPUs: 4}}, map[string]float64{"lab-b/n3": 15})
	if err := st.Allocate(); err != nil {
		t.Fatal(err)
	}
	if u := st.Usage()["lab-b/n3"]; u.GPUs != 1 || u.Starting != 45 {
		t.Fatalf("usage after the move %+v", st.Usage())
	}
	for !st.Done() {
		step()
	}
	res, err := st.Finish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Training resumes at 120 + 30 + 15 and needs 90 s more.
	if j := res.Jobs[0]; j.JCT != 255 || j.Restarts != 1 {
		t.Fatalf("JCT %v restarts %d, want 255 and 1", j.JCT, j.Restarts)
	}
}

// A job that loses one of its nodes restarts even when the policy keeps
// what it has left.
func TestStepperEvictionRestarts(t *testing.T) {
	st := toyStepper(t, keepPolicy{optimizer.Placement{{Node: 0, Count: 1}, {Node: 1, Count: 1}}}, 2)
	if err := st.Advance(); err != nil {
		t.Fatal(err)
	}
	if err := st.Allocate(); err != nil {
		t.Fatal(err)
	}
	if err := st.Advance(); err != nil {
		t.Fatal(err)
	}
	st.SetNodes([]optimizer.Node{{ID: "node-0", GPUs: 4}}, nil)
	if err := st.Allocate(); err != nil {
		t.Fatal(err)
	}
	jobs := st.Jobs()
	if len(jobs) != 1 || jobs[0].Restarts != 1 || jobs[0].Current.Replicas() != 1 || !jobs[0].Restarting {
		t.Fatalf("jobs %+v, want one job restarted on its remaining GPU", jobs)
	}
	if _, err := st.Finish(context.Background()); err == nil {
		t.Fatal("Finish of an unfinished run succeeded")
	}
}
