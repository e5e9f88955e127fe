// Package consensus is the replicated scheduler state of the control
// plane: a hashicorp/raft state machine holding every fact the allocator
// needs (jobs, nodes, the committed allocation and its generation, per-job
// worker incarnations, the profile points and gradient statistics each
// job's model is fitted on), so that a new leader on another server
// resumes exactly where the old one stopped.
//
// # State machine
//
// FSM applies Commands. Apply is deterministic: it reads no clock and no
// randomness (times come inside the commands, from the proposer's clock),
// never depends on map iteration order, and checks a whole command against
// the state before changing anything, so a refused command leaves no
// trace. A refusal is returned in the Result, never as a panic.
//
// Allocation fencing: CommitAllocation carries a generation and the Raft
// term its proposer led in (Server.Leadership). It is applied only if the
// generation is above the committed one and the term equals the term of
// the log entry that carries it. So an allocation decided by a leader
// that has since been deposed cannot commit: forwarded to the new leader
// it lands in an entry of the new term (ErrStaleTerm); kept in the old
// leader's own log it is either discarded with the rest of that leader's
// uncommitted entries or, if it had already reached a majority, committed
// as a legitimate decision of the old term before anything of the new
// one, and the new leader (which reads the state after a barrier) carries
// on from its generation. Generations never go backwards.
//
// Committing an allocation bumps the incarnation of every job whose
// placement changed; reports (UpdateJob, RecordProfile) that name an
// incarnation other than the current one are refused, so a worker from an
// old incarnation can never report into a newer one.
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
// writes it (Encode writes CommandVersion only). Snapshots are a magic, a
// version byte, the canonical state and a CRC-32C.
//
// # Server
//
// Server wraps a raft.Raft with injected transport, stores, forwarder and
// logger, and exposes the API the rest of the system calls: SubmitJob,
// UpdateJob, CompleteJob, RecordProfile, CommitAllocation, RegisterNode,
// MarkNode, linearizable reads (Read), local reads (LocalState), AddVoter
// and RemoveServer. A write on a follower is forwarded to the leader
// through a Forwarder: Transport (ListenTCP) carries both Raft's RPCs and
// forwarded writes on the Raft port, told apart by the first byte of each
// connection, over mutual TLS where only server certificates of the
// cluster CA get in (a forwarded write is a Raft write: it is not on the
// public API); tests use an in-memory forwarder. OpenDisk builds the stores of a data
// directory: raft-boltdb log and stable store and file snapshots; a server
// reopened on the same directory rejoins with its state.
//
// Errors and retries: Server.Apply retries a write (every 10 ms, until
// its context ends) only when nothing can have been applied: no leader
// known, the leader unreachable at connect time, or every command refused
// because the receiver is not the leader. ErrLeadershipLost, ErrTimeout
// and ErrForward are ambiguous: the write may have been applied. Every
// command is safe to resend: a repeated SubmitJob fails with ErrJobExists,
// CompleteJob with ErrJobFinished, CommitAllocation with
// ErrStaleGeneration; RegisterNode and MarkNode are idempotent; a
// repeated report only re-merges a profile measurement.
//
// Timeouts default to LAN values (200 ms heartbeat and election, 100 ms
// leader lease): on loopback with bolt, a SIGKILLed leader is replaced and
// the next write committed in about 0.4 s median (docs/benchmarks.md,
// `pollux bench failover`); see Config.
package consensus
