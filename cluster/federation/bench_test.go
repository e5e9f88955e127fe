package federation

import (
	"fmt"
	"testing"
)

// benchRound is a federation of labs labs of 16 nodes of 4 GPUs, every
// lab trusting every other, half of them idle and half needing twice
// their GPUs, with one lease of every idle lab to a busy one.
func benchRound(labs int) Round {
	r := Round{At: 600, Settings: DefaultSettings()}
	all := make([]*Lab, labs)
	for i := range all {
		l := &Lab{Name: fmt.Sprintf("lab-%02d", i), CA: fmt.Sprintf("ca-%d", i), Quota: Quota{Nominal: 64, LendingLimit: 48, BorrowingLimit: 64}}
		for n := range 16 {
			l.Nodes = append(l.Nodes, Node{ID: fmt.Sprintf("n%d", n), GPUs: 4})
		}
		all[i] = l
	}
	for i, l := range all {
		for j, p := range all {
			if i != j {
				l.Peers = append(l.Peers, Peer{Name: p.Name, CAs: []string{p.CA}})
			}
		}
		curve := ones(32)
		if i%2 == 1 {
			curve = ones(128)
		}
		r.Bids = append(r.Bids, Bid{Lab: l, Curve: curve})
	}
	for i := 0; i+1 < labs; i += 2 {
		r.Leases = append(r.Leases, Lease{ID: fmt.Sprintf("L%d", i), Lender: all[i].Name, Borrower: all[i+1].Name,
			Nodes: []NodeGPUs{{Node: "n15", GPUs: 4}}, Granted: 0, Expires: 900, TTL: 300})
	}
	return r
}

// BenchmarkPlan is one federation round; decisions/op counts the lease
// commands it issues.
func BenchmarkPlan(b *testing.B) {
	for _, labs := range []int{3, 16} {
		b.Run(fmt.Sprintf("labs=%d", labs), func(b *testing.B) {
			r := benchRound(labs)
			n := 0
			for b.Loop() {
				cmds, err := Plan(r)
				if err != nil {
					b.Fatal(err)
				}
				n = len(cmds)
			}
			b.ReportMetric(float64(n), "decisions/op")
		})
	}
}

// BenchmarkLedgerGrantRenewRelease applies a grant, a renewal and a
// release to a lender's ledger and checks an order: the work one lease
// costs a cluster's state machine.
func BenchmarkLedgerGrantRenewRelease(b *testing.B) {
	a, _, _ := testLabs()
	lg, err := NewLedger(a)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		id := fmt.Sprint("l", i)
		at := float64(i)
		for _, c := range []Command{
			grant(id, at, NodeGPUs{"n1", 4}),
			{Op: OpRenew, From: "lab-a", Lease: id, At: at + 1},
			{Op: OpRelease, From: "lab-b", Lease: id, At: at + 2},
		} {
			if _, err := lg.Apply(c); err != nil {
				b.Fatal(err)
			}
			if c.Op == OpGrant {
				if err := lg.Authorize(Order{Borrower: "lab-b", Node: "n1", GPUs: 4, At: at}); err != nil {
					b.Fatal(err)
				}
			}
		}
		i++
	}
}

// BenchmarkDecodeCommand decodes one grant from the wire.
func BenchmarkDecodeCommand(b *testing.B) {
	c := grant("lab-a/n1@600", 600, NodeGPUs{"n1", 4})
	data, err := c.Encode()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := DecodeCommand(data); err != nil {
			b.Fatal(err)
		}
	}
}
