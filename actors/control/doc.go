// Package control is the scheduling side of the control plane: the
// allocator actor and the job actors, on top of the replicated state of
// package consensus.
//
// Every server runs one allocator actor; only the one on the Raft leader
// acts. Every interval it reads the replicated state, reconciles the
// membership (agents that joined are registered, agents that vanished are
// marked dead), builds an optimizer.Snapshot (each job's goodput model
// fitted from its replicated profile), runs the policy, commits the
// allocation with the next generation and its Raft term (so a deposed
// leader is fenced by consensus), and sends every node its whole desired
// state (pb.Assign) with the batch size, accumulation steps and gain each
// job should run at.
//
// Job actors live on the leader too, as children of the allocator actor,
// one per job holding GPUs: they are the owner the node actors send
// reports and exits to. A job actor aggregates its workers' step times
// into profile entries and gradient statistics, writes them through
// consensus (so a fit survives failover), records progress, and completes
// the job exactly once when its workers report done. It accepts reports
// only while a quorum has confirmed, within the last 100 ms, that its
// server leads in the term of its plan, so a leader resumed after a pause
// never acts on what queued up while it was deposed. Apart from the
// measurements of the last flush interval (1 s), nothing a job actor knows
// lives only in its memory: a new leader's job actors start from the
// replicated state.
//
// Models are fitted where decisions are made: the allocator fits each
// job's throughput model from the job's replicated profile (cached until
// the profile changes), so the bid a job makes is its replicated profile
// and gradient statistics, and it survives any failover. A job whose
// workers fail in MaxFailures incarnations in a row without finishing an
// epoch is marked Failed.
//
// The planning functions (BuildSnapshot, Assignments) are pure and tested
// on their own.
package control
