package consensus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestConfirmLeadershipNeedsAQuorum: the leader confirms its term; a follower
// is refused; a leader cut off from the others cannot confirm (so the
// allocator renews no agent's lease), even before it notices and steps
// down. (With Raft's VerifyLeader alone the last check failed about one
// run in five: the answer to a heartbeat sent before the cut counts.)
func TestConfirmLeadershipNeedsAQuorum(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(c.members...)
	term, err := l.srv.ConfirmLeadership(ctxT(t, 5*time.Second))
	if want, _ := l.srv.Leadership(); err != nil || term != want {
		t.Fatalf("leader: term %d, %v; want %d", term, err, want)
	}
	if _, err := c.followers(l)[0].srv.ConfirmLeadership(ctxT(t, 5*time.Second)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower: %v, want ErrNotLeader", err)
	}
	c.isolate(l)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if term, err := l.srv.ConfirmLeadership(ctx); err == nil {
		t.Fatalf("an isolated leader confirmed term %d", term)
	}
}
