// Package allocator is the allocator actor: the scheduling side of the control
// plane, on top of the replicated state of package consensus.
//
// Every server runs one allocator actor; only the one on the Raft leader
// acts. It acts every interval, and at once when its server wins an
// election (it follows Raft's leadership notifications): it reads the
// state behind a barrier, registers the agents gossip sees as nodes and
// marks the missing ones dead, prunes what is past the retention period,
// builds an optimizer.Snapshot in which every job's goodput model comes
// from its job actor's bid (this package never fits a model: see package
// job), runs the policy, and commits the round as one state.Round:
// the allocation with the next generation and its Raft term (fencing a
// deposed leader), the attained service accrued, and per job the new
// bid, the new measurements and whether its incarnation failed. The state
// machine applies it partially, so a job finishing meanwhile no longer
// voids the round. Then it tells every server's job host which job actors
// it runs (rendezvous hashing of job ids over the live servers) and every
// alive node its whole desired state (pb.Assign) with the batch
// configuration each job's bid chose for its shape.
//
// It converges from what the nodes report (level-triggered, like a
// Kubernetes controller): each node's ack says what it really runs, so a
// done incarnation is completed and a failed one restarted whatever
// message was lost on the way. Bids are checked (finite, in range, within
// the job's batch limits, of the job's current incarnation and newest job
// actor session) and counted when dropped.
//
// A new leadership's first round searches at the least effort (seeded
// with the committed allocation hill-climbed) so a new leader acts within
// a second; the search's effort adapts to SearchBudget so rounds stay
// short on a loaded leader. docs/control-plane.md draws the whole
// message flow.
//
// In a lab of a federation (Config.Federation), a round places the lab's
// jobs only on GPUs it does not lend, and hands the lab's bid
// (FederationBid: the value of each GPU to the round's jobs, the GPUs
// used per node; Reclaimable: the lent nodes a what-if round with them
// back would use) to the federation link (actors/fedlink), which
// exchanges bids and commits leases on its own goroutine. The GPUs the
// lab borrows are nodes <lender>/<node> of its rounds, whose Assigns go
// to the lender as orders; as a lender, it merges the runs its borrowers
// ordered (and its ledger authorises) into its nodes' Assigns and relays
// their acks and reports back (borrowed.go).
//
// The planning functions (BuildSnapshot, Assignments, Place,
// FederationBid, Reclaimable) are pure and tested on their own.
package allocator
