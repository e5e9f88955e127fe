package state

import (
	"bytes"
	"errors"
	"testing"

	"pollux/cluster/federation"
)

func labA() *SetLab {
	return &SetLab{Name: "lab-a", CA: "fp-a", Quota: federation.Quota{Nominal: 8, LendingLimit: 4, BorrowingLimit: 8},
		Peers: []federation.Peer{{Name: "lab-b", CAs: []string{"fp-b"}}}}
}

func fedGrant(id, node string, gpus int, at float64) *Lease {
	return &Lease{Cmd: federation.Command{Op: federation.OpGrant, From: "lab-a", Lease: id, Lender: "lab-a", Borrower: "lab-b",
		Nodes: []federation.NodeGPUs{{Node: node, GPUs: gpus}}, At: at, TTL: 300}}
}

func fedCmd(op federation.Op, from, id string, at float64) *Lease {
	return &Lease{Cmd: federation.Command{Op: op, From: from, Lease: id, At: at}}
}

// fedState is a lab with two registered nodes in a federation.
func fedState(t testing.TB) *applier {
	t.Helper()
	a := newApplier()
	a.must(t, 1,
		&RegisterNode{Node: Node{ID: "n1", GPUs: 4, Health: Alive}},
		&RegisterNode{Node: Node{ID: "n2", GPUs: 4, Health: Alive}},
		labA())
	return a
}

// Every lease command goes through the ledger: accepted ones change the
// state the same way on every replica, refused ones (with the ledger's
// reason) change nothing.
func TestLeaseCommands(t *testing.T) {
	a := fedState(t)
	a.must(t, 1, fedGrant("l1", "n1", 4, 10))
	before := EncodeState(a.state())
	refused := []struct {
		name string
		cmd  Command
		want error
	}{
		{"beyond the lending limit", fedGrant("l2", "n2", 4, 11), federation.ErrLendingLimit},
		{"a node the lab does not own", fedGrant("l2", "n9", 1, 11), federation.ErrNotOwner},
		{"GPUs already lent", fedGrant("l2", "n1", 1, 11), federation.ErrNodeLeased},
		{"renewal after expiry", fedCmd(federation.OpRenew, "lab-a", "l1", 310), federation.ErrExpired},
		{"renewal by the borrower", &Lease{Cmd: federation.Command{Op: federation.OpRenew, From: "lab-b", Lease: "l1", At: 200, TTL: federation.MaxTTL}},
			federation.ErrNotParty},
		{"reclaim by the borrower", fedCmd(federation.OpReclaim, "lab-b", "l1", 11), federation.ErrNotParty},
		{"a cluster that is no peer", fedCmd(federation.OpRenew, "lab-x", "l1", 11), federation.ErrUnknownPeer},
		{"expire issued by a peer", &Lease{Cmd: federation.Command{Op: federation.OpExpire, From: "lab-b", At: 400}}, federation.ErrNotParty},
	}
	for _, tc := range refused {
		err := a.apply(t, 1, tc.cmd)
		if !errors.Is(err, ErrLeaseRefused) || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if !bytes.Equal(EncodeState(a.state()), before) {
			t.Fatalf("%s: a refused lease command changed the state", tc.name)
		}
	}
	a.must(t, 1, fedCmd(federation.OpRenew, "lab-a", "l1", 200))
	l, _ := a.state().Fed.Ledger.Lease("l1")
	if l.Expires != 500 {
		t.Errorf("renewed lease expires at %v, want 500", l.Expires)
	}
	a.must(t, 1, &Lease{Cmd: federation.Command{Op: federation.OpExpire, From: "lab-a", At: 499}})
	if a.state().Fed.Ledger.Lent() != 4 {
		t.Error("lease expired before its time")
	}
	a.must(t, 1, &Lease{Cmd: federation.Command{Op: federation.OpExpire, From: "lab-a", At: 500}})
	if lg := a.state().Fed.Ledger; lg.Lent() != 0 || len(lg.Leases()) != 0 {
		t.Errorf("lease did not expire: %v", lg.Leases())
	}
}

// A node that left is no longer the lab's to lend; a lease command to a
// cluster in no federation is refused.
func TestLeaseOwnershipFollowsNodes(t *testing.T) {
	a := fedState(t)
	a.must(t, 1, &MarkNode{ID: "n2", Health: Left})
	if err := a.apply(t, 1, fedGrant("l1", "n2", 4, 1)); !errors.Is(err, federation.ErrNotOwner) {
		t.Errorf("grant of a node that left: %v", err)
	}
	a.must(t, 1, &RegisterNode{Node: Node{ID: "n3", GPUs: 4, Health: Dead}})
	if err := a.apply(t, 1, fedGrant("l1", "n3", 4, 1)); !errors.Is(err, federation.ErrNotOwner) {
		t.Errorf("grant of a dead node: %v", err)
	}
	lab, _ := a.state().FedLab()
	if lab.Quota.Nominal != 4 || lab.GPUs() != 4 {
		t.Errorf("lab after a node left: %+v", lab)
	}
	b := newApplier()
	if err := b.apply(t, 1, fedGrant("l1", "n1", 1, 1)); !errors.Is(err, ErrNoFederation) {
		t.Errorf("lease without a federation: %v", err)
	}
}

// The lab's name is written once; quota and peers may change.
func TestSetLabNameOnce(t *testing.T) {
	a := fedState(t)
	other := labA()
	other.Name = "lab-z"
	if err := a.apply(t, 1, other); !errors.Is(err, ErrClusterConfig) {
		t.Fatalf("renaming the lab: %v", err)
	}
	again := labA()
	again.Quota.LendingLimit = 8
	again.Peers = append(again.Peers, federation.Peer{Name: "lab-c", CAs: []string{"fp-c"}})
	a.must(t, 1, again, fedGrant("l1", "n1", 4, 1), fedGrant("l2", "n2", 4, 1))
	if s := a.state(); s.Fed.Lab.Name != "lab-a" || len(s.Fed.Lab.Peers) != 2 || s.Fed.Ledger.Lent() != 8 {
		t.Errorf("federation after update: %+v lent %d", s.Fed.Lab, s.Fed.Ledger.Lent())
	}
	bad := labA()
	bad.Quota.LendingLimit = 9
	if err := a.apply(t, 1, bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("lending limit above nominal: %v", err)
	}
}

// The federation state survives a snapshot and restore, and the restored
// state refuses what the original would.
func TestFederationSnapshot(t *testing.T) {
	a := fedState(t)
	a.must(t, 1, fedGrant("l0", "n2", 1, 5), fedCmd(federation.OpReclaim, "lab-a", "l0", 6),
		fedGrant("l1", "n1", 4, 10))
	s, err := DecodeState(EncodeState(a.state()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(EncodeState(s), EncodeState(a.state())) || s.Fed.Ledger.LastReclaim() != 6 {
		t.Fatal("federation state changed through a snapshot")
	}
	b := newApplier()
	b.s = s
	if err := b.apply(t, 1, fedGrant("l0", "n2", 1, 30)); !errors.Is(err, federation.ErrLeaseExists) {
		t.Errorf("reuse of an ended lease ID after restore: %v", err)
	}
}

func FuzzDecodeFederation(f *testing.F) {
	a := fedState(f)
	a.must(f, 1, fedGrant("l0", "n2", 1, 5), fedCmd(federation.OpRelease, "lab-b", "l0", 6), fedGrant("l1", "n1", 4, 10))
	s := a.state()
	w := &writer{}
	encodeFederation(w, s.Fed)
	f.Add(w.b)
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &reader{b: b}
		fed, err := decodeFederation(r, s)
		if err == nil {
			err = r.done()
		}
		if err != nil {
			return
		}
		w := &writer{}
		encodeFederation(w, fed)
		if !bytes.Equal(w.b, b) {
			t.Fatalf("decoded federation state re-encodes differently")
		}
	})
}

// A borrower's round places jobs on the GPUs it leases of a peer's node
// (federation.BorrowedID) while the lease is in force at the round's
// time, never beyond them; the allocation then survives a snapshot.
func TestRoundOnBorrowedNodes(t *testing.T) {
	a := newApplier()
	a.must(t, 1,
		&RegisterNode{Node: Node{ID: "m1", GPUs: 4, Health: Alive}},
		&SetLab{Name: "lab-b", CA: "fp-b", Quota: federation.Quota{Nominal: 4, LendingLimit: 4, BorrowingLimit: 8},
			Peers: []federation.Peer{{Name: "lab-a", CAs: []string{"fp-a"}}}},
		fedGrant("l1", "n1", 2, 10),
		&SubmitJob{ID: "j1", Spec: testSpec(), SubmitTime: 10},
		&SubmitJob{ID: "j2", Spec: testSpec(), SubmitTime: 10},
		&SubmitJob{ID: "j3", Spec: testSpec(), SubmitTime: 10},
	)
	upd := []RoundJob{{ID: "j1", HasBid: true, Bid: testBid(1, 1)}, {ID: "j2", HasBid: true, Bid: testBid(1, 1)}, {ID: "j3", HasBid: true, Bid: testBid(1, 1)}}
	ds := drops(t, a, 1, &Round{Generation: 1, Term: 1, Time: 100,
		Jobs: map[string][]Slot{
			"j1": {{"lab-a/n1", 2}, {"m1", 2}},
			"j2": {{"lab-a/n1", 1}}, // beyond the 2 GPUs leased
			"j3": {{"lab-a/n2", 1}}, // a node not leased
		}, Updates: upd})
	if got := dropped(ds); got != "j2/true,j3/true" {
		t.Fatalf("dropped %q, want j2's and j3's placements", got)
	}
	s := a.state()
	if got := s.Allocation.Jobs["j1"]; len(got) != 2 {
		t.Fatalf("j1 placed on %v", got)
	}
	if _, err := DecodeState(EncodeState(s)); err != nil {
		t.Fatalf("restoring a borrower's allocation: %v", err)
	}
	// At the lease's expiry (310) nothing is placed on it.
	ds = drops(t, a, 1, &Round{Generation: 2, Term: 1, Time: 310, Jobs: map[string][]Slot{"j1": {{"lab-a/n1", 2}}}})
	if got := dropped(ds); got != "j1/true" {
		t.Fatalf("dropped %q after the lease's expiry, want j1's placement", got)
	}
}

// A borrowing lab's counts: its own GPUs and what its jobs use of them,
// and apart what they use on nodes borrowed from other labs.
func TestGPUCountsLeaveBorrowedNodesOut(t *testing.T) {
	s := &State{
		Nodes: map[string]*Node{"n1": {ID: "n1", GPUs: 4, Health: Alive}, "n2": {ID: "n2", GPUs: 2, Health: Dead}},
		Allocation: Allocation{Jobs: map[string][]Slot{
			"a": {{Node: "n1", GPUs: 2}, {Node: "lab-b/m1", GPUs: 3}},
			"b": {{Node: "n1", GPUs: 2}},
			"c": {{Node: "lab-c/m7", GPUs: 1}},
		}},
	}
	alive, used := s.GPUCounts()
	if alive != 4 || used != 4 || s.BorrowedInUse() != 4 {
		t.Errorf("alive %d, used %d, borrowed in use %d; want 4, 4, 4", alive, used, s.BorrowedInUse())
	}
}
