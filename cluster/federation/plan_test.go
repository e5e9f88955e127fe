package federation

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func ones(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func ops(cmds []Command) []string {
	var out []string
	for _, c := range cmds {
		s := string(c.Op) + " " + c.Lease
		if c.Op == OpGrant {
			s += " " + c.Lender + ">" + c.Borrower
		}
		out = append(out, s)
	}
	return out
}

func TestPlan(t *testing.T) {
	a, b, c := testLabs()
	// lab-a (16 GPUs) needs 6; lab-b (8 GPUs) needs 16; lab-c trusts only
	// lab-b, and lab-b does not trust lab-c: they never lease.
	busyB := ones(16)
	// bc is lab-b trusting lab-c too; ca is lab-c trusting lab-a too.
	bc := b
	bc.Peers = append(slices.Clone(b.Peers), Peer{"lab-c", []string{"ca-c"}})
	ca := c
	ca.Peers = append(slices.Clone(c.Peers), Peer{"lab-a", []string{"ca-a"}})
	// lowB values its borrowed GPUs (beyond its own 8) at 0.1 each.
	lowB := append(ones(8), 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1)
	idleA := ones(6)
	used := map[string]int{"n0": 4, "n1": 2}
	lease := func(id, node string, at float64) Lease {
		return Lease{ID: id, Lender: "lab-a", Borrower: "lab-b", Nodes: []NodeGPUs{{node, 4}}, Granted: at, Expires: at + 300, TTL: 300}
	}
	tests := []struct {
		name    string
		bids    []Bid
		leases  []Lease
		decider string
		at      float64
		want    []string
	}{
		{
			name: "idle lender lends its least used nodes up to its lending limit",
			bids: []Bid{{Lab: &a, Curve: idleA, Used: used}, {Lab: &b, Curve: busyB}, {Lab: &c, Curve: ones(8)}},
			want: []string{"grant lab-a/n2@60 lab-a>lab-b", "grant lab-a/n3@60 lab-a>lab-b"},
		},
		{
			name: "no grant when the lender's loss outweighs the gain",
			bids: []Bid{{Lab: &a, Curve: ones(16)}, {Lab: &b, Curve: busyB}},
		},
		{
			name:   "renewal while both want it",
			bids:   []Bid{{Lab: &a, Curve: ones(12), Used: used}, {Lab: &b, Curve: busyB}},
			leases: []Lease{lease("L1", "n3", 0)},
			want:   []string{"renew L1"},
		},
		{
			name:   "reclaim when the owner's jobs need the GPUs",
			bids:   []Bid{{Lab: &a, Curve: ones(16)}, {Lab: &b, Curve: busyB}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			want:   []string{"reclaim L1", "reclaim L2"},
		},
		{
			name:   "reclaim only what the owner needs",
			bids:   []Bid{{Lab: &a, Curve: ones(12)}, {Lab: &b, Curve: busyB}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			want:   []string{"reclaim L1", "renew L2"},
		},
		{
			name:   "reclaim only what the owner's allocator would use now",
			bids:   []Bid{{Lab: &a, Curve: ones(16), Reclaimable: map[string]bool{"n2": true}}, {Lab: &b, Curve: busyB}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			want:   []string{"reclaim L2", "renew L1"},
		},
		{
			name: "no lending within the cooldown after a reclaim",
			bids: []Bid{{Lab: &a, Curve: idleA, LastReclaim: 30}, {Lab: &b, Curve: busyB}},
		},
		{
			name: "lending again after the cooldown",
			bids: []Bid{{Lab: &a, Curve: idleA, Used: used, LastReclaim: 30}, {Lab: &b, Curve: busyB}},
			at:   330,
			want: []string{"grant lab-a/n2@330 lab-a>lab-b", "grant lab-a/n3@330 lab-a>lab-b"},
		},
		{
			name:   "a lease moves to a peer that gains clearly more",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &b, Curve: lowB}, {Lab: &ca, Curve: ones(8)}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			want:   []string{"reclaim L1", "grant lab-a/n3@60 lab-a>lab-c", "renew L2"},
		},
		{
			name:   "a lease stays when the other peer gains too little",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &b, Curve: lowB}, {Lab: &ca, Curve: append(ones(4), 0.1, 0.1, 0.1, 0.1)}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			want:   []string{"renew L1", "renew L2"},
		},
		{
			name:   "release when the borrower's jobs would not use them, after the minimum hold",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &b, Curve: ones(10)}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			at:     120,
			want:   []string{"release L2", "renew L1"},
		},
		{
			name:   "no release within the minimum hold",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &b, Curve: ones(10)}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			at:     119,
			want:   []string{"renew L1", "renew L2"},
		},
		{
			// lab-b keeps lab-a's n2 unused for the hold; lab-c would
			// gain from lab-b's GPUs, but lab-b does not lend its own node
			// while borrowed GPUs are what it leaves idle.
			name:   "a borrower holding an unused lease does not lend",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &bc, Curve: ones(12)}, {Lab: &c, Curve: ones(8)}},
			leases: []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			want:   []string{"renew L1", "renew L2"},
		},
		{
			name:    "a decider keeps its own commands",
			bids:    []Bid{{Lab: &a, Curve: nil}, {Lab: &b, Curve: ones(10)}},
			leases:  []Lease{lease("L1", "n3", 0), lease("L2", "n2", 0)},
			decider: "lab-a",
			at:      120,
			want:    []string{"renew L1"},
		},
		{
			name:   "a borrower whose jobs use its GPUs does not lend them",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &bc, Curve: ones(16)}, {Lab: &c, Curve: ones(8)}},
			leases: []Lease{lease("L1", "n3", 0)},
			want:   []string{"renew L1", "grant lab-a/n0@60 lab-a>lab-b"},
		},
		{
			// lab-b's last 4 GPUs are worth 0.01 each to it, 1 each to
			// lab-c, which trusts only lab-b: lab-b lends while it
			// borrows, and borrows another node of idle lab-a for them.
			name:   "a borrower lends what a third lab gains more from",
			bids:   []Bid{{Lab: &a, Curve: nil}, {Lab: &bc, Curve: append(ones(8), 0.01, 0.01, 0.01, 0.01)}, {Lab: &c, Curve: ones(8)}},
			leases: []Lease{lease("L1", "n3", 0)},
			want:   []string{"renew L1", "grant lab-b/m0@60 lab-b>lab-c", "grant lab-a/n0@60 lab-a>lab-b"},
		},
		{
			// lab-a would gain from lab-b's GPUs, but lab-b borrows from
			// it (and lab-a's allocator would not use n3 now, so no
			// reclaim): no lease back the other way.
			name:   "a lender does not borrow from its borrower",
			bids:   []Bid{{Lab: &a, Curve: ones(16), Reclaimable: map[string]bool{}}, {Lab: &b, Curve: append(ones(8), 0.01, 0.01, 0.01, 0.01)}},
			leases: []Lease{lease("L1", "n3", 0)},
			want:   []string{"renew L1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.at
			if at == 0 {
				at = 60
			}
			r := Round{At: at, Settings: DefaultSettings(), Bids: tt.bids, Leases: tt.leases, Decider: tt.decider}
			cmds, err := Plan(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := ops(cmds); !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			// The same round with the bids in another order plans the same.
			r.Bids = slices.Clone(r.Bids)
			slices.Reverse(r.Bids)
			again, err := Plan(r)
			if err != nil || !reflect.DeepEqual(again, cmds) {
				t.Fatalf("bid order changed the plan: %q", ops(again))
			}
			// Every command the plan issues is accepted by both parties'
			// ledgers holding the round's leases.
			ledgers := map[string]*Ledger{}
			for _, bid := range tt.bids {
				ledgers[bid.Lab.Name] = mustLedger(t, *bid.Lab)
			}
			for _, l := range tt.leases {
				g := Command{Op: OpGrant, From: l.Lender, Lease: l.ID, Lender: l.Lender, Borrower: l.Borrower, Nodes: l.Nodes, At: l.Granted, TTL: l.TTL}
				for _, p := range []string{l.Lender, l.Borrower} {
					if _, err := ledgers[p].Apply(g); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, c := range cmds {
				parties := []string{c.Lender, c.Borrower}
				if c.Op != OpGrant {
					for _, l := range tt.leases {
						if l.ID == c.Lease {
							parties = []string{l.Lender, l.Borrower}
						}
					}
				}
				for _, p := range parties {
					if _, err := ledgers[p].Apply(c); err != nil {
						t.Fatalf("%s refused %+v: %v", p, c, err)
					}
				}
			}
		})
	}
}

func TestPlanRefusesBadInput(t *testing.T) {
	a, b, _ := testLabs()
	tests := []struct {
		name string
		r    Round
		want error
	}{
		{"bad settings", Round{Settings: Settings{TTL: 0, OwnerWeight: 1}}, ErrBadConfig},
		{"negative bid", Round{Settings: DefaultSettings(), Bids: []Bid{{Lab: &a, Curve: []float64{-1}}}}, ErrBadConfig},
		{"two bids of a lab", Round{Settings: DefaultSettings(), Bids: []Bid{{Lab: &a}, {Lab: &a}}}, ErrBadConfig},
		{"lease with a lab that did not bid", Round{Settings: DefaultSettings(), Bids: []Bid{{Lab: &a}, {Lab: &b}},
			Leases: []Lease{{ID: "x", Lender: "lab-a", Borrower: "lab-q", Nodes: []NodeGPUs{{"n0", 4}}}}}, ErrUnknownPeer},
	}
	for _, tt := range tests {
		if _, err := Plan(tt.r); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// Round after round, a borrower whose jobs want lab-a's 4 GPUs one round
// and not the next: with no minimum hold the lease is granted and
// released every other round (both sides restart workers each time);
// with a hold of 120 s (rounds 10 s apart) it is granted twice in 200 s.
func TestMinHoldDampsChurn(t *testing.T) {
	a, b, _ := testLabs()
	for _, tc := range []struct {
		hold             float64
		grants, releases int
	}{{0, 10, 10}, {120, 2, 1}} {
		s := DefaultSettings()
		s.MinHold = tc.hold
		la, lb := mustLedger(t, a), mustLedger(t, b)
		grants, releases := 0, 0
		for round := range 20 {
			at := float64(60 + 10*round)
			curve := ones(8)
			if round%2 == 0 {
				curve = ones(12)
			}
			cmds, err := Plan(Round{At: at, Settings: s, Bids: []Bid{{Lab: &a}, {Lab: &b, Curve: curve}}, Leases: la.Leases()})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				for _, lg := range []*Ledger{la, lb} {
					if _, err := lg.Apply(c); err != nil {
						t.Fatalf("hold %v, round %d: %+v refused: %v", tc.hold, round, c, err)
					}
				}
				switch c.Op {
				case OpGrant:
					grants++
				case OpRelease:
					releases++
				}
			}
		}
		if grants != tc.grants || releases != tc.releases {
			t.Errorf("hold %v s: %d grants and %d releases in 20 rounds, want %d and %d", tc.hold, grants, releases, tc.grants, tc.releases)
		}
	}
}
