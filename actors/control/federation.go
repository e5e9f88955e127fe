package control

import (
	"pollux/cluster/federation"
	"pollux/cluster/fedlink"
	"pollux/consensus"
	"pollux/optimizer"
)

// FederationBid is the lab's bid to its federation after a round
// (docs/federation.md, "Deciding leases"): what each GPU is worth to the
// jobs of the round's snapshot (each job's speedup curve from the
// goodput model of its bid, linear while it has none, capped at the
// replicas the policy may give it), measured by the power mean with
// exponent p, and the GPUs the committed allocation uses on each node.
func FederationBid(snap *optimizer.Snapshot, st *consensus.State, p float64) fedlink.LocalBid {
	perNode := 0
	for _, n := range snap.Nodes {
		perNode = max(perNode, n.GPUs)
	}
	ds := make([]federation.Demand, 0, len(snap.Jobs))
	for _, j := range snap.Jobs {
		ds = append(ds, federation.DemandOf(j, perNode))
	}
	return fedlink.LocalBid{Curve: federation.Curve(ds, p, -1), Used: st.UsedGPUs()}
}
