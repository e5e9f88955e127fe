package consensus

import (
	"bytes"
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"pollux/consensus/state"
)

// SaveSnapshot is the replicated state, encoded as Raft snapshots hold
// it, after every write completed before the call (a linearizable read:
// the leader only). It is the backup that RestoreSnapshot takes.
func (s *Server) SaveSnapshot(ctx context.Context) ([]byte, error) {
	st, err := s.Read(ctx)
	if err != nil {
		return nil, err
	}
	return state.EncodeState(st), nil
}

// RestoreSnapshot replaces the replicated state with a saved one (on the
// leader): the cluster's Raft membership stays its own, everything else
// is the backup's. A snapshot that does not decode changes nothing.
func (s *Server) RestoreSnapshot(ctx context.Context, b []byte) error {
	if len(b) > state.MaxSnapshot {
		return fmt.Errorf("consensus: restore: %w: snapshot over %d bytes", state.ErrMalformed, state.MaxSnapshot)
	}
	if _, err := state.DecodeState(b); err != nil {
		return fmt.Errorf("consensus: restore: %w", err)
	}
	if s.closed.Load() {
		return ErrShutdown
	}
	if s.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(b))}
	if err := s.raft.Restore(meta, bytes.NewReader(b), s.timeout(ctx)); err != nil {
		return fmt.Errorf("consensus: restore: %w", err)
	}
	if s.fsm.notify != nil {
		select {
		case s.fsm.notify <- struct{}{}: // the set of live jobs changed
		default:
		}
	}
	return nil
}
