package allocator

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus/state"
)

// Workers on borrowed GPUs (docs/federation.md, "Borrowed GPUs as extra
// nodes"): as a borrower, the allocator sends the Assign of each node
// <lender>/<node> it places jobs on as an order to the lender (order);
// as a lender, it merges the runs its ledger authorises into the Assign
// of its own node (merge), and hands its nodes' acks and the borrowed
// workers' reports to the link, which relays them to the borrower.

// OrdersChanged tells the allocator that a borrower ordered other runs
// on the lab's nodes (fedlink.Config.OnOrder): it runs a round soon, so
// that they start (or stop) without waiting for the next one.
type OrdersChanged struct{}

// orderTimeout bounds the sending of one order.
const orderTimeout = 5 * time.Second

// order sends a borrowed node's Assign to its lender in the background;
// the lender's answer comes back as an AssignAck through the link.
func (a *allocator) order(ctx actor.Context, id string, as *pb.Assign) {
	l, log := a.cfg.Federation, a.cfg.Logger
	go func() {
		c, cancel := context.WithTimeout(context.Background(), orderTimeout)
		defer cancel()
		if err := l.SendOrder(c, id, as); err != nil {
			log.Warn("allocator: order for a borrowed node not taken", "node", id, "generation", as.Generation, "err", err)
		}
	}()
}

// merge adds to the Assign of each of the lab's nodes the runs its
// borrowers ordered there and its ledger authorises now (MergeBorrowed),
// after the gate: a borrower's run keeps the hold its own leader gave it.
func (a *allocator) merge(st *state.State, assign map[string]*pb.Assign) {
	if l := a.cfg.Federation; l != nil {
		MergeBorrowed(st, assign, l.Borrowed, a.cfg.Logger)
	}
}

// MergeBorrowed adds to the Assign of each of the lab's own nodes the
// runs borrowed(node) returns. A borrowed run is left out, with a
// warning, when the node's own runs have a job of the same name or
// leave too few GPUs for it (the lab's jobs still hold GPUs it lent,
// until its next round moves them): a node must never refuse its whole
// assignment because of a borrower.
func MergeBorrowed(st *state.State, assign map[string]*pb.Assign, borrowed func(node string) []*pb.RunJob, log *slog.Logger) {
	for _, id := range slices.Sorted(maps.Keys(assign)) {
		as, n := assign[id], st.Nodes[id]
		if n == nil {
			continue
		}
		used, names := 0, map[string]bool{}
		for _, rj := range as.Runs {
			used += int(rj.Replicas)
			names[rj.Job] = true
		}
		for _, rj := range borrowed(id) {
			if names[rj.Job] || used+int(rj.Replicas) > n.GPUs {
				log.Warn("allocator: a borrower's run does not fit its node this round", "node", id, "job", rj.Job,
					"gpus", rj.Replicas, "used", used, "name_taken", names[rj.Job])
				continue
			}
			used += int(rj.Replicas)
			names[rj.Job] = true
			as.Runs = append(as.Runs, rj)
		}
	}
}
