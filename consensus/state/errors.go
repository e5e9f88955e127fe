package state

import "errors"

// Sentinel errors. Every error the package returns wraps one of these, so
// callers test with errors.Is; package consensus carries them across
// forwarding from a follower to the leader.
var (
	// ErrUnknownVersion is returned for a command or snapshot written in an
	// encoding version this binary does not know. Nothing of it is applied.
	ErrUnknownVersion = errors.New("state: unknown encoding version")
	// ErrUnknownCommand is returned for a command type this binary does not
	// know.
	ErrUnknownCommand = errors.New("state: unknown command type")
	// ErrMalformed is returned for bytes that do not decode: truncated,
	// trailing garbage, oversized fields, bad checksum.
	ErrMalformed = errors.New("state: malformed encoding")
	// ErrInvalid is returned for a well-formed command whose content is not
	// acceptable (empty id, non-finite number, replica bounds inverted, an
	// allocation over a node's capacity, an illegal state transition...).
	ErrInvalid = errors.New("state: invalid command")
	// ErrUnknownJob is returned for a command naming a job never submitted.
	ErrUnknownJob = errors.New("state: unknown job")
	// ErrJobExists is returned when a job id is submitted twice.
	ErrJobExists = errors.New("state: job already exists")
	// ErrJobFinished is returned for a command that would change a job that
	// has already completed or failed (a job finishes exactly once).
	ErrJobFinished = errors.New("state: job already finished")
	// ErrUnknownNode is returned for a command naming a node never
	// registered.
	ErrUnknownNode = errors.New("state: unknown node")
	// ErrStaleGeneration is returned for an allocation whose generation is
	// not above the committed one.
	ErrStaleGeneration = errors.New("state: stale allocation generation")
	// ErrStaleTerm is returned for an allocation decided in a Raft term
	// other than the one its log entry was appended in, or older than the
	// committed allocation's term: it fences a deposed leader.
	ErrStaleTerm = errors.New("state: stale leader term")
	// ErrStaleIncarnation is returned for a job report from a worker
	// incarnation other than the job's current one.
	ErrStaleIncarnation = errors.New("state: stale worker incarnation")
	// ErrClusterConfig is returned when a server would change the
	// cluster's configuration (its checkpoint root), which is set once at
	// bootstrap.
	ErrClusterConfig = errors.New("state: cluster configuration differs")
	// ErrLimit is returned for a submission or registration beyond what
	// the state (and so its snapshots) can hold.
	ErrLimit = errors.New("state: state limit reached")
	// ErrStaleSession is returned for a job actor's measurements or bid
	// from an older session than the one the state acknowledges.
	ErrStaleSession = errors.New("state: stale job actor session")
	// ErrACLBootstrapped is returned for a second bootstrap of the token
	// table: the bootstrap token is made once in a cluster's life.
	ErrACLBootstrapped = errors.New("state: ACL already bootstrapped")
	// ErrUnknownToken is returned for a token (secret or accessor) the
	// table does not hold.
	ErrUnknownToken = errors.New("state: unknown token")
	// ErrTokenRevoked is returned for a token that was revoked.
	ErrTokenRevoked = errors.New("state: token revoked")
	// ErrPermission is returned for a command its token's role or
	// ownership does not allow (a read token submitting, a submit token
	// cancelling another's job).
	ErrPermission = errors.New("state: permission denied")
	// ErrTokenExists is returned when a new token's accessor or secret
	// is already in the table.
	ErrTokenExists = errors.New("state: token already exists")
	// ErrNoFederation is returned for a lease command to a cluster that
	// has no federation configuration (SetLab).
	ErrNoFederation = errors.New("state: the cluster is in no federation")
	// ErrLeaseRefused is returned for a lease command the lab's ledger
	// refuses; it also wraps the cluster/federation sentinel that says
	// why (on the server that applied it; a forwarded refusal keeps the
	// text).
	ErrLeaseRefused = errors.New("state: lease command refused")
	// ErrCheckpointHeld is returned for a submission whose checkpoint
	// directory a live job holds (the same directory, or one inside the
	// other).
	ErrCheckpointHeld = errors.New("state: checkpoint directory held by another job")
	// ErrQuota is returned for a submission beyond its submitter's quota
	// (running plus pending jobs, bytes of specs).
	ErrQuota = errors.New("state: submitter quota exceeded")
	// ErrStateFull is returned for a submission beyond the cluster's
	// state budget.
	ErrStateFull = errors.New("state: state budget exhausted")
)
