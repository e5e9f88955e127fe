// Package consensus replicates the scheduler state (package
// consensus/state) with hashicorp/raft, so that a new leader on another
// server resumes exactly where the old one stopped.
//
// FSM adapts state.ApplyTo to raft.FSM: it decodes each log entry,
// applies it in the entry's term and answers a Result (the entry's index
// and, for a refused command, why); its snapshots are the state's
// canonical encoding.
//
// # Server
//
// Server wraps a raft.Raft with injected transport, stores, forwarder and
// logger, and exposes the API the rest of the system calls: SubmitJob,
// CommitRound, FinishJob, InitCluster, Prune, RegisterNode, MarkNode,
// linearizable reads (Read), local reads (LocalState, LocalJob), the
// membership (Servers, AddVoter, RemoveServer, Unreachable: the peers
// the leader's heartbeats fail to reach), and notifications of
// leadership (LeaderChanges) and of jobs submitted or finished
// (JobsChanged). A write on a follower is forwarded to the leader
// through a Forwarder: Transport (ListenTCP) carries both Raft's RPCs and
// forwarded writes on the Raft port, told apart by the first byte of each
// connection, over mutual TLS where only server certificates of the
// cluster CA get in (a forwarded write is a Raft write: it is not on the
// public API). The leader's address comes from Raft's own configuration,
// so a server added later (AddVoter) is reached as soon as it leads;
// tests use an in-memory forwarder. OpenDisk builds the stores of a data
// directory: raft-boltdb log and stable store and file snapshots; a server
// reopened on the same directory rejoins with its state.
//
// Admission: every write enters the log through the leader, so the
// leader bounds each submitter's submission rate there (admit.go, with
// package consensus/ratelimit): a SubmitJob past its submitter's token
// bucket is refused with a RateError (ErrRateLimited) before it is
// logged, whichever server took it, and a retry of a submission that
// committed passes free.
//
// Errors and retries: Server.Apply retries a write (every 10 ms, until
// its context ends) only when nothing can have been applied: no leader
// known, the leader unreachable at connect time, or every command refused
// because the receiver is not the leader. ErrLeadershipLost, ErrTimeout
// and ErrForward are ambiguous: the write may have been applied. Every
// command is safe to resend: a repeated SubmitJob fails with ErrJobExists,
// FinishJob with ErrJobFinished, Round and CommitAllocation with
// ErrStaleGeneration; RegisterNode, MarkNode, InitCluster and Prune are
// idempotent.
//
// A follower that sees a Raft connection end and the leader's Raft port
// refuse connections (its process ended) elects on the leader lease's
// timeouts instead of the configured ones until a leader is known
// (leaderloss.go); other failures wait out the configured timeouts.
//
// Timeouts default to LAN values (200 ms heartbeat and election, 100 ms
// leader lease): on loopback with bolt, a SIGKILLed leader is replaced and
// the next write committed in about 0.2 s median (0.4 s before
// leaderloss.go; docs/benchmarks.md, `pollux bench failover`); see
// Config.
package consensus
