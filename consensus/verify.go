package consensus

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
)

// VerifyLeader confirms with a quorum of the voters that this server
// leads, and returns its term. A quorum that answered after the call
// began had not voted for anyone else by then, so no other server was
// elected before the call began: the allocator renews the agents' leases
// only behind it (actors/control, lease.go), and a new leader can bound
// every lease its predecessors granted by its own election.
func (s *Server) VerifyLeader(ctx context.Context) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrShutdown
	}
	term := s.raft.CurrentTerm()
	if s.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	if err := wait(ctx, s.raft.VerifyLeader()); err != nil {
		return 0, err
	}
	if now := s.raft.CurrentTerm(); now != term {
		return 0, fmt.Errorf("%w: term moved from %d to %d while verifying", ErrLeadershipLost, term, now)
	}
	return term, nil
}
