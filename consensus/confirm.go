package consensus

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// ConfirmLeadership confirms with a quorum of the voters that this server
// leads, and returns its term: no other server had been elected when the
// call began. It commits a barrier (a log entry that is not a command,
// made after the call began, which a quorum must append while none of
// them has voted for anyone else). The allocator renews the agents'
// leases only behind it (actors/allocator, lease.go), so that a new leader
// bounds every lease its predecessors granted by its own election.
//
// While the log's file system is nearly full (see roomToWrite) it falls
// back to Raft's VerifyLeader, which needs no write but counts a
// follower's answer to a heartbeat already under way when the call
// began: the election it excludes is then only one earlier than the
// heartbeat was sent (a Raft RPC's timeout at most, 2 s on TCP).
func (s *Server) ConfirmLeadership(ctx context.Context) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrShutdown
	}
	term := s.raft.CurrentTerm()
	if s.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	var f raft.Future
	if s.roomToWrite() == nil {
		f = s.raft.Barrier(s.timeout(ctx))
	} else {
		f = s.raft.VerifyLeader()
	}
	if err := wait(ctx, f); err != nil {
		return 0, err
	}
	if now := s.raft.CurrentTerm(); now != term {
		return 0, fmt.Errorf("%w: term moved from %d to %d while confirming", ErrLeadershipLost, term, now)
	}
	return term, nil
}
