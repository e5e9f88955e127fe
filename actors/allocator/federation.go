package allocator

import (
	"fmt"

	"pollux/actors/fedlink"
	"pollux/cluster/federation"
	"pollux/consensus/state"
	"pollux/optimizer"
)

// FederationBid is the lab's bid to its federation after a round
// (docs/federation.md, "Deciding leases"): what each GPU is worth to the
// jobs of the round's snapshot (each job's speedup curve from the
// goodput model of its bid, linear while it has none, capped at the
// replicas the policy may give it), measured by the power mean with
// exponent p, and the GPUs the committed allocation uses on each of the
// lab's own nodes.
func FederationBid(snap *optimizer.Snapshot, st *state.State, p float64) fedlink.LocalBid {
	perNode := 0
	for _, n := range snap.Nodes {
		perNode = max(perNode, n.GPUs)
	}
	ds := make([]federation.Demand, 0, len(snap.Jobs))
	for _, j := range snap.Jobs {
		ds = append(ds, federation.DemandOf(j, perNode))
	}
	used := st.UsedGPUs()
	for id := range used {
		if _, _, borrowed := federation.SplitBorrowed(id); borrowed && st.Nodes[id] == nil {
			delete(used, id) // GPUs the lab borrows: not its nodes
		}
	}
	return fedlink.LocalBid{Curve: federation.Curve(ds, p, -1), Used: used}
}

// Reclaimable is the what-if round of a lender before it reclaims
// (docs/federation.md, "Reclaim"): the lent nodes that policy would
// place the lab's jobs on if every lent GPU were back, on the round's
// bids, time and seed. Only leases of such nodes are reclaimed, so that
// a reclaimed node is used at once. Nil when the lab lends nothing.
func Reclaimable(st *state.State, bids map[string]*state.Bid, now, timeScale float64, seed uint64, policy optimizer.Policy) (map[string]bool, error) {
	if st.Fed == nil || st.Fed.Ledger.Lent() == 0 {
		return nil, nil
	}
	snap, err := buildSnapshot(st, placeableNodes(st), bids, now, timeScale, seed)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	if len(snap.Jobs) == 0 || len(snap.Nodes) == 0 {
		return out, nil
	}
	res, err := policy.Allocate(snap, nil)
	if err != nil {
		return nil, fmt.Errorf("allocator: the what-if round of a reclaim: %w", err)
	}
	for _, p := range res.Placements {
		for _, nc := range p {
			if id := snap.Nodes[nc.Node].ID; nc.Count > 0 && st.Fed.Ledger.LentOn(id) > 0 {
				out[id] = true
			}
		}
	}
	return out, nil
}
