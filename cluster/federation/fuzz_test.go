package federation

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeCommand: a command from outside never panics the decoder or
// the ledger; what decodes re-encodes to the same command; a refused
// command changes nothing; the ledger's invariants hold.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		grant("l1", 0, NodeGPUs{"n0", 4}),
		{Op: OpRenew, From: "lab-b", Lease: "l1", At: 100, TTL: 60},
		{Op: OpReclaim, From: "lab-a", Lease: "l1", At: 100},
		{Op: OpRelease, From: "lab-b", Lease: "l1", At: 100},
		{Op: OpExpire, From: "lab-a", At: 400},
	} {
		data, err := json.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"op":"grant","from":"lab-a","lease":"x","lender":"lab-a","borrower":"lab-b","nodes":[{"node":"n9","gpus":4}],"at":1,"ttl_s":1e308}`))
	f.Add([]byte(`{"op":"renew","from":"lab-b","lease":"l1","at":NaN}`))
	f.Add([]byte(`{"op":"renew"} {"op":"renew"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			return
		}
		enc, err := c.Encode()
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		again, err := DecodeCommand(enc)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, c)
		}
		a, b, _ := testLabs()
		for _, self := range []Lab{a, b} {
			lg := mustLedger(t, self)
			if _, err := lg.Apply(grant("l1", 0, NodeGPUs{"n0", 4})); err != nil {
				t.Fatal(err)
			}
			before := snapshot(lg)
			if _, err := lg.Apply(c); err != nil && !reflect.DeepEqual(before, snapshot(lg)) {
				t.Fatalf("refused (%v) and changed the ledger", err)
			}
			checkInvariants(t, lg)
		}
	})
}

// FuzzLedgerSequence applies sequences of commands drawn from the input
// to a lender's and a borrower's ledger and checks the invariants after
// every step.
func FuzzLedgerSequence(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 0, 0, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90})
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b, _ := testLabs()
		lender, borrower := mustLedger(t, a), mustLedger(t, b)
		ids := []string{"l0", "l1", "l2", "l3"}
		nodes := []string{"n0", "n1", "n2", "n3", "m0"}
		for i := 0; i+2 < len(data) && i < 300; i += 3 {
			op, x, y := data[i], data[i+1], data[i+2]
			at := float64(i) * 20
			var c Command
			switch op % 5 {
			case 0:
				c = grant(ids[x%4], at, NodeGPUs{nodes[x%5], 1 + int(y%5)})
				if y%3 == 0 {
					c.Nodes = append(c.Nodes, NodeGPUs{nodes[(x+1)%5], 4})
				}
			case 1:
				c = Command{Op: OpRenew, From: []string{"lab-a", "lab-b"}[y%2], Lease: ids[x%4], At: at}
			case 2:
				c = Command{Op: OpReclaim, From: []string{"lab-a", "lab-b"}[y%2], Lease: ids[x%4], At: at}
			case 3:
				c = Command{Op: OpRelease, From: []string{"lab-a", "lab-b"}[y%2], Lease: ids[x%4], At: at}
			default:
				c = Command{Op: OpExpire, At: at}
			}
			for _, lg := range []*Ledger{lender, borrower} {
				cc := c
				if cc.Op == OpExpire {
					cc.From = lg.self.Name
				}
				before := snapshot(lg)
				checked := lg.Check(cc)
				if !reflect.DeepEqual(before, snapshot(lg)) {
					t.Fatalf("%s: Check(%+v) changed the ledger", lg.self.Name, cc)
				}
				_, err := lg.Apply(cc)
				if (checked == nil) != (err == nil) {
					t.Fatalf("%s: Check said %v, Apply %v", lg.self.Name, checked, err)
				}
				if err != nil && !reflect.DeepEqual(before, snapshot(lg)) {
					t.Fatalf("%s refused %+v (%v) and changed", lg.self.Name, cc, err)
				}
				// Only the lender (lab-a) moves a lease's expiry.
				if cc.From != "lab-a" {
					for _, l := range lg.Leases() {
						if was, ok := leaseIn(before, l.ID); ok && was.Expires != l.Expires {
							t.Fatalf("%s: %+v from %s moved lease %s's expiry from %v to %v", lg.self.Name, cc, cc.From, l.ID, was.Expires, l.Expires)
						}
					}
				}
				checkInvariants(t, lg)
			}
		}
	})
}

// checkInvariants recomputes the ledger's counters from its leases and
// checks them against the lab's nodes and quota.
func checkInvariants(t *testing.T, lg *Ledger) {
	t.Helper()
	lent, borrowed := 0, 0
	on := map[string]int{}
	for _, l := range lg.Leases() {
		switch lg.self.Name {
		case l.Lender:
			lent += l.GPUs()
			for _, n := range l.Nodes {
				on[n.Node] += n.GPUs
			}
		case l.Borrower:
			borrowed += l.GPUs()
		default:
			t.Fatalf("%s holds lease %s between %s and %s", lg.self.Name, l.ID, l.Lender, l.Borrower)
		}
		if !(l.Expires > l.Granted) {
			t.Fatalf("lease %s expires at %v, granted %v", l.ID, l.Expires, l.Granted)
		}
	}
	if lent != lg.Lent() || borrowed != lg.Borrowed() {
		t.Fatalf("counters lent %d borrowed %d, leases say %d and %d", lg.Lent(), lg.Borrowed(), lent, borrowed)
	}
	q := lg.self.Quota
	if lent > q.LendingLimit || borrowed > q.BorrowingLimit {
		t.Fatalf("lent %d of limit %d, borrowed %d of limit %d", lent, q.LendingLimit, borrowed, q.BorrowingLimit)
	}
	for id, g := range on {
		n, ok := lg.self.Node(id)
		if !ok || g > n.GPUs || lg.LentOn(id) != g {
			t.Fatalf("node %s: %d GPUs lent (counter %d), owned %v %d", id, g, lg.LentOn(id), ok, n.GPUs)
		}
	}
}
