package consensus

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// A follower learns of its leader's loss only when it has not heard from
// it for a heartbeat timeout, checked on a timer of one to two timeouts,
// and refuses a peer's vote while it still knows a leader: with both
// followers waiting out their own timers, a cluster of three elects
// about one to two timeouts after its leader died. When the leader's
// process ends on a machine that stays up, there is a surer sign: its
// Raft connections end (their reads fail at once) and its Raft port
// refuses connections. watchLeaderLoss takes that sign: on a follower,
// when a connection from a peer ends and the leader's Raft port refuses
// a connection (refuses), the leader's process is gone, and the
// follower shortens its heartbeat and election timeouts to the leader
// lease (the least Raft accepts: a leader's lease may not outlast a
// follower's patience) until a leader is known again. A dead machine, a
// partition or a leader slow to answer refuses nothing: those still wait
// out the configured timeouts. Elections stay Raft's own (pre-vote
// included); only their timing changes.

// leaderLossRestore bounds, in configured heartbeat timeouts, how long
// the short timeouts stay when no leader is elected (no quorum left).
const leaderLossRestore = 20

// watchLeaderLoss runs until the server stops, acting on m's ended
// (see above).
func (s *Server) watchLeaderLoss(m *mux) {
	for {
		select {
		case <-m.ended:
		case <-s.stop:
			return
		}
		if s.raft.State() != raft.Follower {
			continue
		}
		addr, id := s.raft.LeaderWithID()
		if addr == "" || !m.refuses(addr, s.cfg.HeartbeatTimeout) {
			continue
		}
		s.electSoon(id)
	}
}

// refuses reports whether addr's Raft port refuses a connection within
// timeout: nothing listens there, so the process that did has ended. A
// port that answers gets a Raft connection (over TLS where Raft's are),
// closed at once: Raft's handler takes its end quietly, where a bare TCP
// connection would be logged as a failed handshake. A connection that
// fails otherwise (reset in its handshake: a dying process's port can
// still accept for a moment after its connections ended) is tried
// again, every probeRetry.
func (m *mux) refuses(addr raft.ServerAddress, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		c, err := m.dialType(ctx, string(addr), connRaft)
		cancel()
		switch {
		case err == nil:
			c.Close()
			return false
		case errors.Is(err, syscall.ECONNREFUSED):
			return true
		case time.Until(deadline) < probeRetry:
			return false
		}
		time.Sleep(probeRetry)
	}
}

// probeRetry is the pause between two tries of refuses.
const probeRetry = 20 * time.Millisecond

// electSoon shortens Raft's heartbeat and election timeouts to the
// leader lease until a leader other than gone is known (or
// leaderLossRestore configured timeouts have passed), then restores
// them.
func (s *Server) electSoon(gone raft.ServerID) {
	orig := s.raft.ReloadableConfig()
	short := orig
	short.HeartbeatTimeout = s.cfg.LeaderLeaseTimeout
	short.ElectionTimeout = s.cfg.LeaderLeaseTimeout
	if short.HeartbeatTimeout >= orig.HeartbeatTimeout {
		return
	}
	if err := s.raft.ReloadConfig(short); err != nil {
		s.log.Warn("consensus: leader's process gone; timeouts not shortened", "leader", string(gone), "err", err.Error())
		return
	}
	s.log.Info("consensus: leader's process gone: electing on the lease's timeouts", "leader", string(gone),
		"heartbeat_timeout", short.HeartbeatTimeout.String())
	deadline := time.Now().Add(leaderLossRestore * orig.HeartbeatTimeout)
	tick := time.NewTicker(short.HeartbeatTimeout / 2)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		if _, id := s.raft.LeaderWithID(); (id != "" && id != gone) || time.Now().After(deadline) {
			break
		}
	}
	if err := s.raft.ReloadConfig(orig); err != nil {
		s.log.Warn("consensus: configured timeouts not restored", "err", err.Error())
	}
}
