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
	// ErrNoSpace is returned for a write refused, before it reached the
	// log, because the leader's data directory has less free space than
	// Config.MinFreeSpace: nothing of it is applied.
	ErrNoSpace = errors.New("consensus: data directory full")
	// ErrRateLimited is returned for a submission refused, before it
	// reached the log, because its submitter passed its token bucket on
	// the leader (state.Quota Rate and Burst): nothing of it is applied.
	// RetryAfter tells how long until the bucket admits one.
	ErrRateLimited = errors.New("consensus: submitter past its submission rate")
)
