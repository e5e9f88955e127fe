package main

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/node"
	"pollux/actors/pb"
)

// keepLease gives the agent at actorAddr a lease of ten minutes for the
// assignment it holds, as the leader would: a renewal that fetches the
// agent's state and a nonce, then one that echoes it.
func (c *controller) keepLease(actorAddr string) {
	c.t.Helper()
	renew := func(m *pb.LeaseRenew) *pb.LeaseAck {
		// A restarted agent is reached once the remote has given up on
		// its predecessor's connection.
		deadline := time.Now().Add(15 * time.Second)
		for {
			res, err := c.sys.Root.RequestFuture(actor.NewPID(actorAddr, node.ActorName), m, 5*time.Second).Result()
			if err == nil {
				return res.(*pb.LeaseAck)
			}
			if time.Now().After(deadline) {
				c.t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	first := renew(&pb.LeaseRenew{ClusterId: "test-cluster", Term: 1, LeaseMs: 1})
	st := first.Status
	ack := renew(&pb.LeaseRenew{ClusterId: st.ClusterId, Term: st.Term, Generation: st.Generation,
		LeaseMs: uint64(10 * time.Minute / time.Millisecond), Echo: first.Nonce})
	if !ack.Renewed {
		c.t.Fatalf("agent's lease not renewed: %v", ack)
	}
}

func TestServerRefusesALeaseWithoutMargin(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--agent-lease", "3s"}, 2},                       // 4.5 s with its margin, over the default grace of 3 s
		{[]string{"--agent-lease", "4s", "--node-grace", "5s"}, 2}, // 6 s
		{[]string{"--agent-lease", "0s"}, 2},
		{[]string{"--agent-lease", "11m", "--node-grace", "1h"}, 2},
	} {
		args := append([]string{"server", "--id", "s0", "--data-dir", t.TempDir()}, c.args...)
		if code := run(args); code != c.code {
			t.Errorf("%v: exit code %d, want %d", c.args, code, c.code)
		}
	}
	if err := checkLease(2*time.Second, 3*time.Second); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if err := checkLease(3*time.Second, 3*time.Second); err == nil || !strings.Contains(err.Error(), "at most 2s") {
		t.Errorf("a 3 s lease under a 3 s grace: %v", err)
	}
}
