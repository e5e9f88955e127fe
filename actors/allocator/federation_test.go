package allocator

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"pollux/actors/pb"
	"pollux/cluster/federation"
	"pollux/consensus/state"
	"pollux/optimizer"
)

// The bid counts every GPU each job of the snapshot could use, the
// first GPU of each job worth the most under Pollux's power mean, and
// reports what the allocation uses per node.
func TestFederationBid(t *testing.T) {
	snap := &optimizer.Snapshot{
		Nodes: []optimizer.Node{{ID: "n0", GPUs: 4}, {ID: "n1", GPUs: 4}},
		Jobs:  []optimizer.Job{{ID: "a", MinReplicas: 1, MaxReplicas: 2}, {ID: "b", MinReplicas: 1, MaxReplicas: 3}},
	}
	st := &state.State{Allocation: state.Allocation{Jobs: map[string][]state.Slot{"a": {{Node: "n0", GPUs: 2}}, "b": {{Node: "n0", GPUs: 1}, {Node: "n1", GPUs: 2}}}}}
	bid := FederationBid(snap, st, -1)
	if len(bid.Curve) != 5 {
		t.Fatalf("curve %v, want 5 GPUs' worth", bid.Curve)
	}
	for i := 1; i < len(bid.Curve); i++ {
		if bid.Curve[i] > bid.Curve[i-1] {
			t.Fatalf("curve %v increases", bid.Curve)
		}
	}
	if bid.Curve[0] != bid.Curve[1] || bid.Curve[1] < 100*bid.Curve[2] {
		t.Errorf("curve %v: the first GPU of each job should be worth far more than the next", bid.Curve)
	}
	if bid.Used["n0"] != 3 || bid.Used["n1"] != 2 {
		t.Errorf("used %v", bid.Used)
	}
	if lin := FederationBid(snap, st, 1); lin.Curve[0] != lin.Curve[4] {
		t.Errorf("utilitarian curve of linear jobs %v is not flat", lin.Curve)
	}
}

// GPUs the lab lends are not its own to place on: a node lent whole is
// left out of the round (its jobs' slots there dropped, so they are
// placed afresh), a node lent in part offers the rest, and the jobs on it
// are placed afresh when they no longer fit.
func TestLentGPUsAreNotPlaced(t *testing.T) {
	st := testState()
	lab := &state.SetLab{Name: "lab-a", CA: "fp", Quota: federation.Quota{Nominal: 8, LendingLimit: 8},
		Peers: []federation.Peer{{Name: "lab-b", CAs: []string{"fq"}}}}
	grant := func(id, node string, gpus int) *state.Lease {
		return &state.Lease{Cmd: federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: id, Lender: "lab-a", Borrower: "lab-b",
			Nodes: []federation.NodeGPUs{{Node: node, GPUs: gpus}}, At: 1, TTL: 300}}
	}
	for _, c := range []state.Command{lab, grant("l1", "n2", 4), grant("l2", "n1", 3)} {
		if _, err := state.ApplyTo(st, c, 2); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := BuildSnapshot(st, nil, 200, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Nodes) != 1 || snap.Nodes[0].ID != "n1" || snap.Nodes[0].GPUs != 1 {
		t.Fatalf("nodes %+v, want n1 with the 1 GPU not lent", snap.Nodes)
	}
	// Job a held 2 GPUs on n1 (now 1 left) and 1 on n2 (lent whole).
	if a := snap.Jobs[0]; a.ID != "a" || len(a.Current) != 0 {
		t.Errorf("job a's current placement %+v, want none", a.Current)
	}
	if bid := FederationBid(snap, st, -1); bid.Used["n1"] != 2 || bid.Used["n2"] != 1 {
		t.Errorf("the bid's use %v is the committed allocation's", bid.Used)
	}
}

// The what-if round of a reclaim: a lent node the lab's jobs would use
// if it were back is reclaimable; none is while the jobs have all they
// want, and nothing is asked of a lab that lends nothing.
func TestReclaimable(t *testing.T) {
	st := testState()
	lab := &state.SetLab{Name: "lab-a", CA: "fp", Quota: federation.Quota{Nominal: 8, LendingLimit: 8},
		Peers: []federation.Peer{{Name: "lab-b", CAs: []string{"fq"}}}}
	if got, err := Reclaimable(st, nil, 200, 1, 1, optimizer.NewGreedy()); got != nil || err != nil {
		t.Fatalf("a lab in no federation: %v, %v", got, err)
	}
	if _, err := state.ApplyTo(st, lab, 2); err != nil {
		t.Fatal(err)
	}
	if got, err := Reclaimable(st, nil, 200, 1, 1, optimizer.NewGreedy()); got != nil || err != nil {
		t.Fatalf("a lab that lends nothing: %v, %v", got, err)
	}
	grant := &state.Lease{Cmd: federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: "l1", Lender: "lab-a", Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: "n2", GPUs: 4}}, At: 1, TTL: 300}}
	if _, err := state.ApplyTo(st, grant, 2); err != nil {
		t.Fatal(err)
	}
	// Jobs a (2 GPUs of n1 now, up to 4) and b (pending, up to 1) want
	// more than n1's 4 GPUs: with n2 back, the what-if round uses it.
	st.Allocation.Jobs["a"] = []state.Slot{{Node: "n1", GPUs: 2}}
	got, err := Reclaimable(st, nil, 200, 1, 1, optimizer.NewGreedy())
	if err != nil || !got["n2"] || len(got) != 1 {
		t.Fatalf("with jobs wanting more: %v, %v", got, err)
	}
	// With no job left that wants a GPU, nothing is reclaimable.
	for _, id := range []string{"a", "b"} {
		st.Jobs[id].State = state.Completed
		delete(st.Allocation.Jobs, id)
	}
	if got, err := Reclaimable(st, nil, 200, 1, 1, optimizer.NewGreedy()); err != nil || len(got) != 0 || got == nil {
		t.Fatalf("without jobs: %v, %v", got, err)
	}
}

// A borrower's rounds see the GPUs it leases as nodes <lender>/<node>
// (until one interval before the lease expires), a job placed there
// gets its runs in that node's Assign (the order to the lender), and
// the bid's use counts only the lab's own nodes.
func TestBorrowedGPUsAreNodes(t *testing.T) {
	st := borrowerState(t, "lab-a")
	snap, err := BuildSnapshot(st, nil, 200, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, n := range snap.Nodes {
		ids = append(ids, n.ID)
	}
	if len(ids) != 3 || ids[2] != "lab-a/n0" || snap.Nodes[2].GPUs != 4 {
		t.Fatalf("nodes %v, want n1, n2 and lab-a/n0 with 4 GPUs", snap.Nodes)
	}
	if nodes := roundNodes(st, 400); len(nodes) != 2 {
		t.Errorf("at the lease's expiry the round still places on %v", nodes)
	}
	st.Allocation.Jobs = map[string][]state.Slot{"a": {{Node: "n1", GPUs: 2}, {Node: "lab-a/n0", GPUs: 2}}}
	assign, uncovered := Assignments(st, AssignOptions{Term: 2})
	if len(uncovered) != 0 {
		t.Fatalf("uncovered %v", uncovered)
	}
	order := assign["lab-a/n0"]
	if order == nil || order.ClusterId != "c1" || order.Term != 2 || order.Generation != 7 || len(order.Runs) != 1 {
		t.Fatalf("order %v", order)
	}
	if rj := order.Runs[0]; rj.Job != "a" || rj.Replicas != 2 || rj.WorldSize != 4 || len(rj.ReportTokens) != 2 {
		t.Errorf("borrowed run %v", rj)
	}
	if bid := FederationBid(snap, st, -1); len(bid.Used) != 1 || bid.Used["n1"] != 2 {
		t.Errorf("the bid's use %v, want n1's alone", bid.Used)
	}
}

// A job whose first node is borrowed has its rendezvous on the agent of
// the lender's node, at the host its lender gave (BorrowedHost), on
// every node it runs on; a job whose first node is the lab's own keeps
// that node's host.
func TestRendezvousOnABorrowedFirstNode(t *testing.T) {
	st := borrowerState(t, "lab-a")
	st.Allocation.Jobs = map[string][]state.Slot{"a": {{Node: "lab-a/n0", GPUs: 2}, {Node: "n1", GPUs: 2}}}
	hosts := map[string]string{"lab-a/n0": "10.1.0.7"}
	assign, _ := Assignments(st, AssignOptions{Term: 2, BorrowedHost: func(id string) string { return hosts[id] }})
	for _, id := range []string{"lab-a/n0", "n1"} {
		if as := assign[id]; as == nil || len(as.Runs) != 1 || as.Runs[0].MasterAddr != "10.1.0.7" {
			t.Fatalf("the run on %s: %v, want its rendezvous on the lender's agent 10.1.0.7", id, as)
		}
	}
	// Not known (no bid from the lender yet): the loopback, as before.
	delete(hosts, "lab-a/n0")
	assign, _ = Assignments(st, AssignOptions{Term: 2, BorrowedHost: func(id string) string { return hosts[id] }})
	if rj := assign["n1"].Runs[0]; rj.MasterAddr != "127.0.0.1" {
		t.Errorf("rendezvous %q with the lender's host unknown, want 127.0.0.1", rj.MasterAddr)
	}
	// The lab's own node first: its own agent's host.
	hosts["lab-a/n0"] = "10.1.0.7"
	st.Allocation.Jobs["a"] = []state.Slot{{Node: "n1", GPUs: 2}, {Node: "lab-a/n0", GPUs: 2}}
	assign, _ = Assignments(st, AssignOptions{Term: 2, BorrowedHost: func(id string) string { return hosts[id] }})
	if rj := assign["lab-a/n0"].Runs[0]; rj.MasterAddr != "10.0.0.1" {
		t.Errorf("rendezvous %q of a job first on n1, want n1's 10.0.0.1", rj.MasterAddr)
	}
}

// A borrowed node's domains are valid topology domains, whatever the
// case of the lender's name, so the policy accepts the snapshot.
func TestBorrowedNodesPassThePolicy(t *testing.T) {
	st := borrowerState(t, "Lab.A")
	snap, err := BuildSnapshot(st, nil, 200, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := optimizer.NewGreedy().Allocate(snap, nil)
	if err != nil {
		t.Fatalf("the policy refuses a snapshot with a borrowed node: %v", err)
	}
	if _, err := Slots(snap, res.Placements); err != nil {
		t.Fatal(err)
	}
}

// A lender merges its borrowers' runs into its nodes' Assigns, except a
// run whose job name the node already runs or that does not fit beside
// the lab's own runs.
func TestMergeBorrowed(t *testing.T) {
	st := testState()
	assign, _ := Assignments(st, AssignOptions{Term: 2})
	own := map[string]int{}
	for id, as := range assign {
		own[id] = len(as.Runs)
	}
	borrowed := map[string][]*pb.RunJob{
		"n1": {{Job: "x", Replicas: 2}, {Job: "a", Replicas: 1}}, // n1 runs 2 GPUs of job a: x fits, a's name is taken
		"n2": {{Job: "y", Replicas: 4}},                          // n2 runs 1 GPU of job a: y does not fit
	}
	var logs bytes.Buffer
	MergeBorrowed(st, assign, func(node string) []*pb.RunJob { return borrowed[node] }, slog.New(slog.NewTextHandler(&logs, nil)))
	jobsOn := func(id string) []string {
		var out []string
		for _, rj := range assign[id].Runs[own[id]:] {
			out = append(out, rj.Job)
		}
		return out
	}
	if got := jobsOn("n1"); len(got) != 1 || got[0] != "x" {
		t.Errorf("n1 got borrowed runs %v, want x", got)
	}
	if got := jobsOn("n2"); len(got) != 0 {
		t.Errorf("n2 got borrowed runs %v beyond its GPUs", got)
	}
	if n := strings.Count(logs.String(), "does not fit"); n != 2 {
		t.Errorf("%d warnings, want 2:\n%s", n, logs.String())
	}
}

// borrowerState is testState as lab-b, which leases all 4 GPUs of
// lender's node n0 from time 100 for 300 s.
func borrowerState(t *testing.T, lender string) *state.State {
	t.Helper()
	st := testState()
	lab := &state.SetLab{Name: "lab-b", CA: "fq", Quota: federation.Quota{Nominal: 8, LendingLimit: 8, BorrowingLimit: 8},
		Peers: []federation.Peer{{Name: lender, CAs: []string{"fp"}}}}
	grant := &state.Lease{Cmd: federation.Command{Op: federation.OpGrant, From: lender, Lease: "l1", Lender: lender, Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: "n0", GPUs: 4}}, At: 100, TTL: 300}}
	for _, c := range []state.Command{lab, grant} {
		if _, err := state.ApplyTo(st, c, 2); err != nil {
			t.Fatal(err)
		}
	}
	return st
}
