// Package fedbench is `pollux bench federation`: how fast federated labs
// commit lease decisions in both parties' Raft logs over the federation
// channel, and how soon a lab notices a peer's loss.
//
// Lease decisions: Labs labs run in this process, each a Raft group of
// Servers servers (in-memory Raft transport, bolt logs on disk, so every
// commit is fsynced) with a fedlink.Link serving its federation listener
// on loopback over mutual TLS 1.3 (each lab its own CA). The first lab
// lends whole nodes to the others, Concurrency leases at a time: each
// lease is granted, renewed and reclaimed through Link.Commit (the
// two-cluster commit: a grant or renewal committed by the borrower, then
// the lender; a reclaim by the lender, then the borrower). Afterwards
// every lab's ledger is read from its Raft state, as an observer outside
// the link: every lease must have ended as reclaimed in both the
// lender's and the borrower's, and none be left.
//
// Loss detection: Labs `pollux server` processes (one server per lab,
// each with its own CA and federation file, and unless NoGossip in the
// federation's WAN gossip pool) exchange bids every Interval; one is
// SIGKILLed and the time until the first lab logs the peer lost is
// measured, Trials times (the lab restarted in between), with what
// noticed it first: the gossip pool (the peer's servers gone from it) or
// the bid exchange (no bid for two intervals).
package fedbench
