package federation

import (
	"errors"
	"reflect"
	"testing"
)

// A ledger rebuilt from its State makes the same decisions as the
// original: same leases, counters, refusals of ended leases.
func TestLedgerStateRoundTrip(t *testing.T) {
	a, _, _ := testLabs()
	lg := mustLedger(t, a)
	for _, c := range []Command{
		grant("l1", 0, NodeGPUs{"n0", 4}),
		grant("l2", 1, NodeGPUs{"n1", 2}),
		{Op: OpReclaim, From: "lab-a", Lease: "l2", At: 5},
		grant("l3", 6, NodeGPUs{"n2", 2}),
		{Op: OpExpire, From: "lab-a", At: 400},
		grant("l4", 401, NodeGPUs{"n3", 4}),
	} {
		if _, err := lg.Apply(c); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	st := lg.State()
	if len(st.Leases) != 1 || len(st.Ended) != 3 || st.LastReclaim != 5 {
		t.Fatalf("state %+v", st)
	}
	re, err := RestoreLedger(a, st)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(re.State(), st) || re.Lent() != lg.Lent() || re.LentOn("n3") != 4 {
		t.Fatalf("restored %+v (lent %d), want %+v (lent %d)", re.State(), re.Lent(), st, lg.Lent())
	}
	if _, err := re.Apply(Command{Op: OpRenew, From: "lab-a", Lease: "l1", At: 402}); !errors.Is(err, ErrExpired) {
		t.Errorf("renewal of a lease that expired before the restore: %v", err)
	}
	if _, err := re.Apply(grant("l5", 402, NodeGPUs{"n3", 1})); !errors.Is(err, ErrNodeLeased) {
		t.Errorf("grant of GPUs lent before the restore: %v", err)
	}
}

func TestRestoreLedgerRefusesBadState(t *testing.T) {
	a, _, _ := testLabs()
	good := Lease{ID: "l1", Lender: "lab-a", Borrower: "lab-b", Nodes: []NodeGPUs{{"n0", 4}}, Granted: 0, Expires: 300, TTL: 300}
	other := good
	other.Lender, other.Borrower = "lab-b", "lab-c"
	early := good
	early.Expires = -1
	tests := map[string]LedgerState{
		"leases out of order":       {Leases: []Lease{{ID: "l2", Lender: "lab-a", Borrower: "lab-b", Nodes: []NodeGPUs{{"n1", 4}}, Expires: 300, TTL: 300}, good}},
		"lease of two other labs":   {Leases: []Lease{other}},
		"expiry before the grant":   {Leases: []Lease{early}},
		"ended and active":          {Leases: []Lease{good}, Ended: []Ended{{ID: "l1", Why: EndExpired, At: 1}}},
		"ended twice":               {Ended: []Ended{{ID: "x", Why: EndExpired, At: 1}, {ID: "x", Why: EndReleased, At: 2}}},
		"ended for no reason known": {Ended: []Ended{{ID: "x", Why: "lost", At: 1}}},
		"last reclaim not a time":   {LastReclaim: -3},
	}
	for name, st := range tests {
		if _, err := RestoreLedger(a, st); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", name, err)
		}
	}
}

func TestRelabelKeepsLeasesAndName(t *testing.T) {
	a, b, _ := testLabs()
	lg := mustLedger(t, a)
	if _, err := lg.Apply(grant("l1", 0, NodeGPUs{"n0", 4})); err != nil {
		t.Fatal(err)
	}
	if err := lg.Relabel(b); !errors.Is(err, ErrBadConfig) {
		t.Errorf("relabel to another lab: %v", err)
	}
	a2 := a
	a2.Nodes = a.Nodes[:2]
	a2.Quota = Quota{Nominal: 8, LendingLimit: 4, BorrowingLimit: 0}
	if err := lg.Relabel(a2); err != nil {
		t.Fatal(err)
	}
	if lg.Lent() != 4 || len(lg.Leases()) != 1 {
		t.Fatalf("leases after relabel: lent %d, %v", lg.Lent(), lg.Leases())
	}
	if _, err := lg.Apply(grant("l2", 1, NodeGPUs{"n2", 4})); !errors.Is(err, ErrNotOwner) {
		t.Errorf("grant of a node the lab no longer has: %v", err)
	}
}
