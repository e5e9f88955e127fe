// Package consensus is the replicated scheduler state of the control
// plane: a hashicorp/raft state machine holding every fact the allocator
// needs (the cluster's id and checkpoint root, jobs, nodes, the committed
// allocation and its generation, per-job worker incarnations, each job
// actor's bid, the profile its model is fitted on, its progress, attained
// service and crash counter), so that a new leader on another server
// resumes exactly where the old one stopped.
//
// # State machine
//
// FSM applies Commands. Apply is deterministic: it reads no clock and no
// randomness (times come inside the commands, from the proposer's clock),
// never depends on map iteration order, and checks a command against the
// state before changing anything, so a refused command leaves no trace.
// A refusal is returned in the Result, never as a panic.
//
// One Raft write per allocation round: a Round carries the new allocation,
// the attained service accrued since the last round, and per job its
// actor's new bid, its new measurements (aggregated between two bids) and
// whether its incarnation failed (a crash counted; the job fails after
// MaxFailures in a row without an epoch finished). A Round is fenced as a
// whole: its generation must be above the committed one and its term the
// term of the log entry that carries it, so a round decided by a leader
// that has since been deposed cannot commit: forwarded to the new leader
// it lands in an entry of the new term (ErrStaleTerm); kept in the old
// leader's own log it is either discarded with the rest of that leader's
// uncommitted entries or, if it had already reached a majority, committed
// as a legitimate decision of the old term before anything of the new
// one. Generations never go backwards. Past the fence a Round is applied
// partially, in job id order: entries naming an unknown or finished job,
// a stale incarnation or an older job actor session are dropped (named in
// Result.Dropped) and the rest applied, so a job finishing while a round
// is decided no longer voids it.
//
// Measurements are merged exactly once: a job actor numbers its
// measurements within its session (sessions only grow), and a Round
// merges one only if it continues the acknowledged sequence of the job
// (MeasSession, MeasSeq) or opens a newer session from its start.
//
// A placement that changes, or a restart, bumps the job's incarnation;
// reports and bids naming an incarnation other than the current one are
// refused or dropped, so workers of an old incarnation never count in a
// newer one. FinishJob ends a job exactly once (completed, failed or
// cancelled); Prune forgets finished jobs and gone nodes (retention);
// InitCluster sets the cluster id, checkpoint root and report key (from
// which the leader derives workers' report tokens) once. Submissions
// and registrations beyond MaxJobs and MaxNodes are refused (ErrLimit),
// so the state always fits a snapshot. The commands of the first version
// of the loop (UpdateJob, RecordProfile, CommitAllocation, CompleteJob)
// are still applied, so older logs replay.
//
// # API tokens
//
// The state holds the API's token table (ACL, acl.go): per token its
// public accessor, name, role (read < submit < admin), the SHA-256 of its
// secret (never the secret), creation time and revoked flag. BootstrapACL
// makes the first admin token, once in the cluster's life; CreateToken
// and RevokeToken manage the rest. Every server authenticates API
// requests against its own copy (Server.Authenticate), and the writes a
// token asks for carry its accessor (SubmitJob.Submitter, CancelJob.By,
// CreateToken.By, RevokeToken.By): the state machine checks the token's
// role (and for a cancel, that it submitted the job or is an admin) in
// log order, so a token revoked before a write is refused on every
// server even if a lagging follower let the request through. An empty
// accessor is a server's own command (or a cluster run --insecure).
//
// # Encoding
//
// A command is a version byte, a type byte and the fields in a small
// hand-written binary encoding (uvarints, zig-zag varints, float64 as IEEE
// bits, length-prefixed strings and lists; see wire.go). Why not JSON or
// protobuf: the log is written and fsynced on every commit and replayed
// on every restart, so compactness matters; floats round-trip bit-exactly;
// the encoding is canonical (maps written sorted), so snapshots of equal
// states are byte-identical and can be compared; it does not depend on the
// JSON tags of the optimizer's types, which serve another purpose; and
// the decoder is small and fuzzed, with every length
// bounded before it allocates. A command in an unknown version is refused
// whole (ErrUnknownVersion). Every server refuses such a command the same
// way, so replicas cannot diverge; but a cluster must therefore run
// binaries that know a new version on every server before any leader
// writes it (Encode writes CommandVersion only); new command types take
// new type bytes (8..15 for the control loop's, 16..23 for tokens,
// 24..27 for node attributes, 28..31 for autoscaling, 36..39 for the
// federation). Fields added to an existing command (a
// job's submitter, node attributes, placement constraints, topology
// levels and report key; a measurement's GPU type and a bid's per-type
// parts, flagged in a Round update's flags byte) are encoded last and
// only when set, so older entries decode unchanged. Snapshots are a
// magic, a version byte, the canonical state and a CRC-32C; version 3
// holds the token table, job submitters, the topology levels, the report
// key, node attributes and job placement constraints; version 4 adds the
// autoscaler's state (scale.go); version 5 the autoscaler's request
// times and billed seconds; version 6 records profiles by GPU type and
// bids' per-type parts (types.go); version 7 adds the federation state
// (federation.go: the lab's name, CA, quota, peers and lease ledger);
// version 1 snapshots (before bids and the cluster configuration),
// version 2 (before all of version 3's additions), and versions 3 to 6
// still decode.
//
// # Federation
//
// A lab of a federation (docs/federation.md) holds its identity and its
// ledger of leases here: SetLab writes its name once (a server started
// with another name is refused, ErrClusterConfig) and its quota and
// peers; a Lease command wraps one federation.Command and is applied
// through federation.Ledger.Apply, against the lab's alive registered
// nodes as they are when it applies. A refused lease command is the
// Result's error (ErrLeaseRefused, wrapping the federation package's
// reason) and changes nothing.
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
// Timeouts default to LAN values (200 ms heartbeat and election, 100 ms
// leader lease): on loopback with bolt, a SIGKILLed leader is replaced and
// the next write committed in about 0.4 s median (docs/benchmarks.md,
// `pollux bench failover`); see Config.
package consensus
