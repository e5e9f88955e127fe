// Package federation is the lease logic of federated lab clusters: who a
// cluster trusts, what it owns, what it may lend and borrow (quotas in the
// shape of Kueue cohorts), the lease ledger every party keeps, and the
// round decision that grants, renews and reclaims leases by comparing the
// labs' bids on one scale.
//
// Why a package of its own, and why pure: the same decisions must come
// out of the trace-driven simulator (testbed/fedsim) and the live control
// planes, and a lease must be committed in two clusters' Raft logs, whose
// state machines have to agree. So, like the optimizer, everything here is
// deterministic: no clock (every command carries its time), no I/O, no
// randomness, and every input from outside (a peer's command, its bid)
// is decoded strictly and validated before it can change anything.
//
// The pieces:
//
//   - Lab, Quota, Peer: a cluster's identity (its name and the fingerprint
//     of its CA), its nodes, its quota (nominal quota, borrowing limit,
//     lending limit) and the peers it trusts, each with the CA it must
//     present (Trust).
//   - Ledger: the leases one cluster is party to, as its Raft state
//     machine holds them. Apply takes a Command (grant, renew, reclaim,
//     release, expire) and either applies it whole or refuses it with an
//     error wrapping one of the sentinel errors and changes nothing.
//     Authorize checks a borrower's order to run on a lender's node.
//   - Curve and Demand: a lab's bid, the value of its g-th GPU to its jobs
//     in units of one GPU's worth of a job's own goodput (the speedup its
//     goodput model predicts over one GPU), so that labs with different
//     jobs compare on one scale.
//   - Plan: one federation round, from every lab's bid and the leases to
//     the commands that reclaim, release, renew and grant.
//
// docs/federation.md describes the design and how the live system runs it.
package federation
