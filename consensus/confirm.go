package consensus

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// ConfirmLeadership confirms with a quorum of the voters that this server
// leads, and returns its term: no other server had been elected when the
// call began. It commits a barrier, which a quorum must append; the
// allocator renews the agents' leases only behind it. While the disk is
// nearly full (roomToWrite) it falls back to Raft's VerifyLeader, whose
// bound is one heartbeat weaker (docs/control-plane.md, "Agents hold
// leases").
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
