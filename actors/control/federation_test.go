package control

import (
	"testing"

	"pollux/consensus"
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
	st := &consensus.State{Allocation: consensus.Allocation{Jobs: map[string][]consensus.Slot{"a": {{Node: "n0", GPUs: 2}}, "b": {{Node: "n0", GPUs: 1}, {Node: "n1", GPUs: 2}}}}}
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
