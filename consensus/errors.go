package consensus

import "errors"

// Sentinel errors. Every error the package returns wraps one of these, so
// callers test with errors.Is; they survive forwarding from a follower to
// the leader (see errorCodes).
var (
	// ErrNotLeader is returned by a leader-only operation (a linearizable
	// read, a configuration change, a forwarded write) on a server that is
	// not the Raft leader.
	ErrNotLeader = errors.New("consensus: not the leader")
	// ErrNoLeader is returned when a write cannot be forwarded because no
	// leader is known (an election is under way, or this server is in a
	// minority partition).
	ErrNoLeader = errors.New("consensus: no known leader")
	// ErrLeadershipLost is returned when the leader lost its leadership
	// after accepting a write but before it was known to commit: the write
	// may or may not be applied (read the state to find out).
	ErrLeadershipLost = errors.New("consensus: leadership lost before the write was known to commit")
	// ErrTimeout is returned when Raft did not commit or verify in time.
	ErrTimeout = errors.New("consensus: timed out")
	// ErrShutdown is returned by a server that has been shut down.
	ErrShutdown = errors.New("consensus: server shut down")
	// ErrForward is returned when forwarding a write to the leader failed
	// at the transport level (the write may or may not have been applied).
	ErrForward = errors.New("consensus: forwarding to the leader failed")

	// ErrUnknownVersion is returned for a command or snapshot written in an
	// encoding version this binary does not know. Nothing of it is applied.
	ErrUnknownVersion = errors.New("consensus: unknown encoding version")
	// ErrUnknownCommand is returned for a command type this binary does not
	// know.
	ErrUnknownCommand = errors.New("consensus: unknown command type")
	// ErrMalformed is returned for bytes that do not decode: truncated,
	// trailing garbage, oversized fields, bad checksum.
	ErrMalformed = errors.New("consensus: malformed encoding")
	// ErrInvalid is returned for a well-formed command whose content is not
	// acceptable (empty id, non-finite number, replica bounds inverted, an
	// allocation over a node's capacity, an illegal state transition...).
	ErrInvalid = errors.New("consensus: invalid command")

	// ErrUnknownJob is returned for a command naming a job never submitted.
	ErrUnknownJob = errors.New("consensus: unknown job")
	// ErrJobExists is returned when a job id is submitted twice.
	ErrJobExists = errors.New("consensus: job already exists")
	// ErrJobFinished is returned for a command that would change a job that
	// has already completed or failed (a job finishes exactly once).
	ErrJobFinished = errors.New("consensus: job already finished")
	// ErrUnknownNode is returned for a command naming a node never
	// registered.
	ErrUnknownNode = errors.New("consensus: unknown node")
	// ErrStaleGeneration is returned for an allocation whose generation is
	// not above the committed one.
	ErrStaleGeneration = errors.New("consensus: stale allocation generation")
	// ErrStaleTerm is returned for an allocation decided in a Raft term
	// other than the one its log entry was appended in, or older than the
	// committed allocation's term: it fences a deposed leader.
	ErrStaleTerm = errors.New("consensus: stale leader term")
	// ErrStaleIncarnation is returned for a job report from a worker
	// incarnation other than the job's current one.
	ErrStaleIncarnation = errors.New("consensus: stale worker incarnation")
	// ErrNoSpace is returned for a write refused, before it reached the
	// log, because the leader's data directory has less free space than
	// Config.MinFreeSpace: nothing of it is applied.
	ErrNoSpace = errors.New("consensus: data directory full")
	// ErrClusterConfig is returned when a server would change the
	// cluster's configuration (its checkpoint root), which is set once at
	// bootstrap.
	ErrClusterConfig = errors.New("consensus: cluster configuration differs")
	// ErrLimit is returned for a submission or registration beyond what
	// the state (and so its snapshots) can hold.
	ErrLimit = errors.New("consensus: state limit reached")
	// ErrStaleSession is returned for a job actor's measurements or bid
	// from an older session than the one the state acknowledges.
	ErrStaleSession = errors.New("consensus: stale job actor session")

	// ErrACLBootstrapped is returned for a second bootstrap of the token
	// table: the bootstrap token is made once in a cluster's life.
	ErrACLBootstrapped = errors.New("consensus: ACL already bootstrapped")
	// ErrUnknownToken is returned for a token (secret or accessor) the
	// table does not hold.
	ErrUnknownToken = errors.New("consensus: unknown token")
	// ErrTokenRevoked is returned for a token that was revoked.
	ErrTokenRevoked = errors.New("consensus: token revoked")
	// ErrPermission is returned for a command its token's role or
	// ownership does not allow (a read token submitting, a submit token
	// cancelling another's job).
	ErrPermission = errors.New("consensus: permission denied")
	// ErrTokenExists is returned when a new token's accessor or secret
	// is already in the table.
	ErrTokenExists = errors.New("consensus: token already exists")

	// ErrNoFederation is returned for a lease command to a cluster that
	// has no federation configuration (SetLab).
	ErrNoFederation = errors.New("consensus: the cluster is in no federation")
	// ErrLeaseRefused is returned for a lease command the lab's ledger
	// refuses; it also wraps the cluster/federation sentinel that says
	// why (on the server that applied it; a forwarded refusal keeps the
	// text).
	ErrLeaseRefused = errors.New("consensus: lease command refused")
)
