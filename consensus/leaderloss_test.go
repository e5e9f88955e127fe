package consensus

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/internal/poll"
)

// TestStoppedLeaderReplacedWithinOneHeartbeatTimeout stops the leader of
// three servers on real Raft ports (its connections and port close, as
// when its process ends) with a heartbeat timeout of 3 s and a lease of
// 100 ms. A follower that waited out its timeout could not even start an
// election within 3 s of the leader's last message; the followers, told
// by the closed connections and the refused port, elect a new leader
// well within it, and then return to the configured timeouts.
func TestStoppedLeaderReplacedWithinOneHeartbeatTimeout(t *testing.T) {
	const heartbeat = 3 * time.Second
	tc := newPortCluster(t, true, func(id raft.ServerID) Config {
		c := testConfig(id)
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = heartbeat, heartbeat, 100*time.Millisecond
		return c
	})
	old := tc.leader(tc.members...)
	rest := tc.followers(old)
	stopped := time.Now()
	if err := old.srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	var elected time.Duration
	poll.Until(t, 4*heartbeat, "a new leader", func() bool {
		for _, m := range rest {
			if m.srv.Raft().State() == raft.Leader {
				elected = time.Since(stopped)
				return true
			}
		}
		return false
	})
	t.Logf("new leader %v after the old one stopped", elected)
	if elected >= heartbeat {
		t.Errorf("new leader %v after the old one stopped, want under the heartbeat timeout %v", elected, heartbeat)
	}
	for _, m := range rest {
		poll.Until(t, 2*heartbeat, "the configured timeouts back on "+string(m.id), func() bool {
			rc := m.srv.Raft().ReloadableConfig()
			return rc.HeartbeatTimeout == heartbeat && rc.ElectionTimeout == heartbeat
		})
	}
}

// TestRefusesOnlyWhereNothingListens: a live Raft port (over TLS) answers
// the probe, the same port once its server stopped refuses it.
func TestRefusesOnlyWhereNothingListens(t *testing.T) {
	tc := newTLSCluster(t)
	leader := tc.leader(tc.members...)
	probe := tc.ports[tc.followers(leader)[0].id].mux
	if probe.refuses(leader.addr, time.Second) {
		t.Errorf("the leader's live port %s refuses", leader.addr)
	}
	if err := leader.srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if !probe.refuses(leader.addr, time.Second) {
		t.Errorf("the stopped leader's port %s does not refuse", leader.addr)
	}
}
