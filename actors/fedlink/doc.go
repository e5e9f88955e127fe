// Package fedlink is the live link between the control planes of
// federated lab clusters (issue 17, docs/federation.md "The live
// system"): the federation file a server is started with, the
// federation listener (HTTPS over mutual TLS 1.3, each peer checked
// against the CA of the cluster its certificate names and then by
// federation.Lab.Trusts), the bids the labs' leaders exchange every
// interval, and the two-cluster commit of the lease commands that
// federation.Plan decides.
//
// Why a package of its own: the lease logic (cluster/federation) is pure
// and the ledger lives in the Raft state (consensus); what is left is
// I/O between clusters, which must authenticate every message, never
// block the allocator, and degrade to "the lease runs out" whenever a
// peer does not answer. The allocator (actors/allocator) only hands the
// link its lab's bid after each round (SetBid); the link does the rest
// on its own goroutine, while its server leads.
//
// Two-cluster commit (docs/federation.md): a grant or a renewal is sent
// by the lender to the borrower, which commits it in its Raft log (its
// state machine checks it with its ledger), and only then committed by
// the lender; a reclaim is committed by the lender first and then told
// to the borrower, a release by the borrower first and then told to the
// lender (both best effort: the other side's ledger expires the lease
// anyway). Every cluster expires leases by its own clock. A follower
// that receives a lease command commits it through its leader (the
// consensus package forwards writes); one that receives a bid redirects
// it to its leader's federation address.
//
// A peer counts as lost when no bid came from it for two intervals: its
// bid is then left out of the plan, so its leases are not renewed and
// run out by their time to live.
//
// Workers on borrowed GPUs (borrowed.go): the borrower's allocator sends
// the Assign of each node it borrows as an order (SendOrder); the
// lender's leader keeps each borrower's newest order per node, fenced
// like an Assign and authorised by its ledger when it arrives and again
// whenever its allocator merges it into its node's Assign (Borrowed), so
// a lease that ended stops its workers at the lender's next round. The
// node's acks (SplitAck) and the workers' reports (Relay) go back to the
// borrower's leader, which hands them to its allocator and job actors.
package fedlink
