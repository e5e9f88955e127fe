package federation

import (
	"errors"
	"reflect"
	"testing"
)

// labs are three labs that trust each other; c does not trust a.
func testLabs() (a, b, c Lab) {
	a = Lab{Name: "lab-a", CA: "ca-a",
		Nodes: []Node{{"n0", 4}, {"n1", 4}, {"n2", 4}, {"n3", 4}},
		Quota: Quota{Nominal: 16, BorrowingLimit: 8, LendingLimit: 8},
		Peers: []Peer{{"lab-b", []string{"ca-b"}}, {"lab-c", []string{"ca-c"}}}}
	b = Lab{Name: "lab-b", CA: "ca-b",
		Nodes: []Node{{"m0", 4}, {"m1", 4}},
		Quota: Quota{Nominal: 8, BorrowingLimit: 8, LendingLimit: 4},
		Peers: []Peer{{"lab-a", []string{"ca-a"}}}}
	c = Lab{Name: "lab-c", CA: "ca-c",
		Nodes: []Node{{"k0", 4}},
		Quota: Quota{Nominal: 4, BorrowingLimit: 4, LendingLimit: 4},
		Peers: []Peer{{"lab-b", []string{"ca-b"}}}}
	return a, b, c
}

func mustLedger(t *testing.T, l Lab) *Ledger {
	t.Helper()
	lg, err := NewLedger(l)
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

func grant(id string, at float64, nodes ...NodeGPUs) Command {
	return Command{Op: OpGrant, From: "lab-a", Lease: id, Lender: "lab-a", Borrower: "lab-b", Nodes: nodes, At: at, TTL: 300}
}

// Every bad input is refused with its sentinel error and changes neither
// the lender's nor the borrower's ledger.
func TestLedgerRefusesBadCommands(t *testing.T) {
	a, b, _ := testLabs()
	setup := []Command{grant("l1", 0, NodeGPUs{"n0", 4})}
	tests := []struct {
		name string
		on   string // "lender", "borrower" or "both"
		cmd  Command
		want error
	}{
		{"lease beyond the lending limit", "lender", grant("l2", 10, NodeGPUs{"n1", 4}, NodeGPUs{"n2", 4}), ErrLendingLimit},
		{"lease beyond the borrowing limit", "borrower", grant("l2", 10, NodeGPUs{"n1", 4}, NodeGPUs{"n2", 4}, NodeGPUs{"n3", 4}), ErrBorrowingLimit},
		{"lease of a node the lender does not own", "lender", grant("l2", 10, NodeGPUs{"m0", 4}), ErrNotOwner},
		{"lease of more GPUs than the node has", "lender", grant("l2", 10, NodeGPUs{"n1", 5}), ErrNotOwner},
		{"lease of GPUs already lent", "lender", grant("l2", 10, NodeGPUs{"n0", 1}), ErrNodeLeased},
		{"grant not issued by the lender", "both", Command{Op: OpGrant, From: "lab-b", Lease: "l2", Lender: "lab-a", Borrower: "lab-b", Nodes: []NodeGPUs{{"n1", 4}}, At: 10, TTL: 300}, ErrNotParty},
		{"grant reusing a lease ID", "both", grant("l1", 10, NodeGPUs{"n1", 4}), ErrLeaseExists},
		{"grant to a cluster that is no peer", "lender", Command{Op: OpGrant, From: "lab-a", Lease: "l2", Lender: "lab-a", Borrower: "lab-x", Nodes: []NodeGPUs{{"n1", 4}}, At: 10, TTL: 300}, ErrUnknownPeer},
		{"command from a stranger", "both", Command{Op: OpRenew, From: "lab-x", Lease: "l1", At: 10}, ErrUnknownPeer},
		{"renewal of an expired lease", "both", Command{Op: OpRenew, From: "lab-a", Lease: "l1", At: 300}, ErrExpired},
		{"renewal of an unknown lease", "both", Command{Op: OpRenew, From: "lab-a", Lease: "l9", At: 10}, ErrUnknownLease},
		{"renewal by the borrower", "both", Command{Op: OpRenew, From: "lab-b", Lease: "l1", At: 10}, ErrNotParty},
		{"renewal by the borrower for a day", "both", Command{Op: OpRenew, From: "lab-b", Lease: "l1", At: 10, TTL: MaxTTL}, ErrNotParty},
		{"reclaim by the borrower", "both", Command{Op: OpReclaim, From: "lab-b", Lease: "l1", At: 10}, ErrNotParty},
		{"release by the lender", "both", Command{Op: OpRelease, From: "lab-a", Lease: "l1", At: 10}, ErrNotParty},
		{"expire issued by a peer", "lender", Command{Op: OpExpire, From: "lab-b", At: 10}, ErrNotParty},
		{"negative time", "both", Command{Op: OpRenew, From: "lab-b", Lease: "l1", At: -1}, ErrBadCommand},
		{"grant without a time to live", "both", Command{Op: OpGrant, From: "lab-a", Lease: "l2", Lender: "lab-a", Borrower: "lab-b", Nodes: []NodeGPUs{{"n1", 4}}, At: 10}, ErrBadCommand},
		{"node named twice", "both", grant("l2", 10, NodeGPUs{"n1", 2}, NodeGPUs{"n1", 2}), ErrBadCommand},
		{"unknown operation", "both", Command{Op: "steal", From: "lab-b", Lease: "l1", At: 10}, ErrBadCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lender, borrower := mustLedger(t, a), mustLedger(t, b)
			for _, c := range setup {
				for _, lg := range []*Ledger{lender, borrower} {
					if _, err := lg.Apply(c); err != nil {
						t.Fatal(err)
					}
				}
			}
			var on []*Ledger
			switch tt.on {
			case "lender":
				on = []*Ledger{lender}
			case "borrower":
				on = []*Ledger{borrower}
			default:
				on = []*Ledger{lender, borrower}
			}
			for _, lg := range on {
				before := snapshot(lg)
				if err := lg.Check(tt.cmd); !errors.Is(err, tt.want) {
					t.Fatalf("%s: Check: got %v, want %v", lg.self.Name, err, tt.want)
				}
				_, err := lg.Apply(tt.cmd)
				if !errors.Is(err, tt.want) {
					t.Fatalf("%s: got %v, want %v", lg.self.Name, err, tt.want)
				}
				if after := snapshot(lg); !reflect.DeepEqual(before, after) {
					t.Fatalf("%s: a refused command changed the ledger:\n%+v\n%+v", lg.self.Name, before, after)
				}
			}
		})
	}
}

type ledgerView struct {
	Leases         []Lease
	Lent, Borrowed int
	LentOn         map[string]int
	Ended          int
}

func snapshot(lg *Ledger) ledgerView {
	on := map[string]int{}
	for k, v := range lg.lentOn {
		on[k] = v
	}
	return ledgerView{lg.Leases(), lg.lent, lg.borrowed, on, len(lg.order)}
}

// A lease lives while renewed, ends by its time to live otherwise, and
// after that a renewal is refused as expired.
func TestLedgerLifecycle(t *testing.T) {
	a, b, _ := testLabs()
	lender, borrower := mustLedger(t, a), mustLedger(t, b)
	apply := func(lg *Ledger, c Command) []Lease {
		t.Helper()
		out, err := lg.Apply(c)
		if err != nil {
			t.Fatalf("%s: %v", lg.self.Name, err)
		}
		return out
	}
	both := func(c Command) {
		apply(lender, c)
		apply(borrower, c)
	}
	both(grant("l1", 0, NodeGPUs{"n0", 4}, NodeGPUs{"n1", 2}))
	if lender.Lent() != 6 || borrower.Borrowed() != 6 || lender.LentOn("n1") != 2 {
		t.Fatalf("lent %d, borrowed %d, on n1 %d", lender.Lent(), borrower.Borrowed(), lender.LentOn("n1"))
	}
	// The borrower may run on what it leases, not beyond.
	if err := lender.Authorize(Order{Borrower: "lab-b", Node: "n1", GPUs: 2, At: 10}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Order{
		{Borrower: "lab-b", Node: "n1", GPUs: 3, At: 10},
		{Borrower: "lab-b", Node: "n2", GPUs: 1, At: 10},
		{Borrower: "lab-b", Node: "n0", GPUs: 1, At: 300},
	} {
		if err := lender.Authorize(o); !errors.Is(err, ErrNotLeased) {
			t.Fatalf("order %+v: %v, want ErrNotLeased", o, err)
		}
	}
	if err := lender.Authorize(Order{Borrower: "lab-c", Node: "n0", GPUs: 1, At: 10}); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("order of another peer: %v", err)
	}
	both(Command{Op: OpRenew, From: "lab-a", Lease: "l1", At: 250})
	if l, _ := lender.Lease("l1"); l.Expires != 550 {
		t.Fatalf("expires %v after renewal at 250, want 550", l.Expires)
	}
	if got := apply(lender, Command{Op: OpExpire, From: "lab-a", At: 549}); len(got) != 0 {
		t.Fatalf("expired early: %+v", got)
	}
	got := apply(lender, Command{Op: OpExpire, From: "lab-a", At: 550})
	if len(got) != 1 || got[0].ID != "l1" || lender.Lent() != 0 || lender.LentOn("n1") != 0 {
		t.Fatalf("expire: %+v, lent %d", got, lender.Lent())
	}
	if _, err := lender.Apply(Command{Op: OpRenew, From: "lab-a", Lease: "l1", At: 551}); !errors.Is(err, ErrExpired) {
		t.Fatalf("renewal after expiry: %v", err)
	}
	// The borrower's ledger expires it by its own clock, too.
	apply(borrower, Command{Op: OpExpire, From: "lab-b", At: 560})
	if borrower.Borrowed() != 0 {
		t.Fatalf("borrower still borrows %d", borrower.Borrowed())
	}
	// Reclaim frees the node for another lease; the old ID stays used.
	both(grant("l2", 600, NodeGPUs{"n0", 4}))
	both(Command{Op: OpReclaim, From: "lab-a", Lease: "l2", At: 660})
	both(grant("l3", 660, NodeGPUs{"n0", 4}))
	if _, err := lender.Apply(grant("l2", 700, NodeGPUs{"n1", 4})); !errors.Is(err, ErrLeaseExists) {
		t.Fatalf("reused ID: %v", err)
	}
	both(Command{Op: OpRelease, From: "lab-b", Lease: "l3", At: 700})
	if _, err := lender.Apply(Command{Op: OpRenew, From: "lab-a", Lease: "l3", At: 710}); !errors.Is(err, ErrUnknownLease) {
		t.Fatalf("renewal of a released lease: %v", err)
	}
	if lender.Lent() != 0 || borrower.Borrowed() != 0 || len(lender.Leases()) != 0 {
		t.Fatalf("leftovers: lent %d borrowed %d leases %v", lender.Lent(), borrower.Borrowed(), lender.Leases())
	}
}

func TestTrusts(t *testing.T) {
	a, _, _ := testLabs()
	a.Peers[0].CAs = append(a.Peers[0].CAs, "ca-b-new")
	tests := []struct {
		cluster, ca string
		want        error
	}{
		{"lab-b", "ca-b", nil},
		{"lab-b", "ca-b-new", nil},
		{"lab-b", "ca-c", ErrUnknownCA},
		{"lab-x", "ca-b", ErrUnknownPeer},
	}
	for _, tt := range tests {
		if err := a.Trusts(tt.cluster, tt.ca); !errors.Is(err, tt.want) {
			t.Errorf("Trusts(%s, %s) = %v, want %v", tt.cluster, tt.ca, err, tt.want)
		}
	}
}

func TestLabValidate(t *testing.T) {
	base, _, _ := testLabs()
	tests := []struct {
		name   string
		change func(l *Lab)
	}{
		{"bad name", func(l *Lab) { l.Name = "lab a" }},
		{"no CA", func(l *Lab) { l.CA = "" }},
		{"duplicate node", func(l *Lab) { l.Nodes[1].ID = "n0" }},
		{"node without GPUs", func(l *Lab) { l.Nodes[0].GPUs = 0 }},
		{"nominal above owned", func(l *Lab) { l.Quota.Nominal = 17 }},
		{"lending above nominal", func(l *Lab) { l.Quota.LendingLimit = 17 }},
		{"negative borrowing", func(l *Lab) { l.Quota.BorrowingLimit = -1 }},
		{"itself as a peer", func(l *Lab) { l.Peers[0].Name = "lab-a" }},
		{"peer twice", func(l *Lab) { l.Peers[1].Name = "lab-b" }},
		{"peer without CA", func(l *Lab) { l.Peers[0].CAs = nil }},
	}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		l, _, _ := testLabs()
		tt.change(&l)
		if err := l.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v, want ErrBadConfig", tt.name, err)
		}
		if _, err := NewLedger(l); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: NewLedger: %v, want ErrBadConfig", tt.name, err)
		}
	}
}

func TestBorrowedNodes(t *testing.T) {
	la, lb, _ := testLabs()
	lender, borrower := mustLedger(t, la), mustLedger(t, lb)
	g := grant("l1", 100, NodeGPUs{"n0", 2})
	g.TTL = 60
	for _, lg := range []*Ledger{lender, borrower} {
		if _, err := lg.Apply(g); err != nil {
			t.Fatal(err)
		}
	}
	if got := borrower.BorrowedNodes(100); len(got) != 1 || got["lab-a/n0"] != 2 {
		t.Fatalf("borrower sees %v, want lab-a/n0: 2", got)
	}
	// At the expiry (160) the lease is no longer placed on.
	if got := borrower.BorrowedNodes(160); len(got) != 0 {
		t.Fatalf("borrower sees %v at expiry", got)
	}
	if got := lender.BorrowedNodes(100); len(got) != 0 {
		t.Fatalf("lender sees %v borrowed", got)
	}
	l, n, ok := SplitBorrowed("lab-a/n0")
	if !ok || l != "lab-a" || n != "n0" {
		t.Fatalf("SplitBorrowed = %q %q %v", l, n, ok)
	}
	for _, bad := range []string{"n0", "/n0", "lab-a/", "lab-a/n0/x", "lab a/n0"} {
		if _, _, ok := SplitBorrowed(bad); ok {
			t.Errorf("SplitBorrowed(%q) ok", bad)
		}
	}
}

// leaseIn finds lease id in a snapshot.
func leaseIn(v ledgerView, id string) (Lease, bool) {
	for _, l := range v.Leases {
		if l.ID == id {
			return l, true
		}
	}
	return Lease{}, false
}
