package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/internal/poll"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// TestCancelRetentionAndServerReplacement runs 3 servers and an agent as
// processes: a running job is cancelled (its workers stop, it is kept as
// cancelled, then pruned after --retain); a SIGKILLed server is replaced
// by a new one with operator raft add-server and remove-server; then
// another server is killed and the cluster still runs a job to
// completion. Removals that would leave no quorum are refused.
func TestCancelRetentionAndServerReplacement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a multi-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir,
		Servers: 3, Agents: 1, GPUsPerAgent: 2, Interval: 500 * time.Millisecond, TimeScale: 50, Retain: 3 * time.Second, LogLevel: "warn"})
	defer c.finish()
	live := func() []*launch.Member {
		var out []*launch.Member
		for _, m := range c.Servers {
			if m.Serving() {
				out = append(out, m)
			}
		}
		return out
	}
	// The clients reach the servers over HTTPS with the run's CA, a
	// follower first: membership changes are redirected (307) to the
	// leader's API, which the client follows.
	client := func(args ...string) (int, string) {
		t.Helper()
		var ms []*launch.Member
		leader, _, _ := c.Leader(ctx, 5*time.Second)
		for _, m := range live() {
			if m != leader {
				ms = append(ms, m)
			}
		}
		if leader != nil {
			ms = append(ms, leader)
		}
		code, out := runOut(append(args, clientFlags(c.Cluster, c.AdminToken(), ms)...)...)
		t.Logf("pollux %v: exit %d: %s", args, code, strings.TrimSpace(out))
		return code, out
	}
	hc := c.HTTPClient(5 * time.Second)
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	submit := func(name, app string) {
		t.Helper()
		spec, err := launch.Job{Name: name, App: app}.Spec(cat, 2)
		if err != nil {
			t.Fatal(err)
		}
		if a := c.Client().SubmitAny(ctx, name, spec, 100*time.Millisecond, 20*time.Second); !a.OK() {
			t.Fatalf("submitting %s: %s", name, a.Error())
		}
	}
	jobState := func(name string) (int, api.Job) {
		var j api.Job
		for _, m := range live() {
			resp, err := hc.Get("https://" + m.HTTP + api.PathJobs + "/" + name)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = json.Unmarshal(b, &j)
			return resp.StatusCode, j
		}
		return 0, j
	}

	// Cancel: a long job runs, is cancelled, its workers stop.
	submit("long", "bert")
	poll.Until(t, 30*time.Second, "the long job's workers", func() bool { return len(workersIn(dir, "POLLUX_JOB_ID=long")) > 0 })
	if code, out := client("cancel", "long"); code != 0 || !strings.Contains(out, "cancelled long") {
		t.Fatalf("cancel: %d %q", code, out)
	}
	// (a follower's answer may lag by a moment)
	poll.Until(t, 5*time.Second, "the job listed as cancelled, without GPUs", func() bool {
		code, j := jobState("long")
		return code == http.StatusOK && j.State == "cancelled" && j.GPUs == 0
	})
	if code, _ := client("cancel", "long"); code != 2 {
		t.Errorf("cancelling a finished job: exit %d, want 2", code)
	}
	if code, _ := client("cancel", "no-such-job"); code != 2 {
		t.Errorf("cancelling an unknown job: exit %d, want 2", code)
	}
	poll.Until(t, 30*time.Second, "the cancelled job's workers to stop", func() bool { return len(workersIn(dir, "POLLUX_JOB_ID=long")) == 0 })
	// Retention: pruned after --retain.
	poll.Until(t, 30*time.Second, "the cancelled job to be pruned", func() bool {
		code, _ := jobState("long")
		return code == http.StatusNotFound
	})

	// Replace a SIGKILLed server.
	leader, _, err := c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var victim *launch.Member
	for _, m := range c.Servers {
		if m != leader {
			victim = m
			break
		}
	}
	t.Logf("killing follower %s", victim.ID)
	if err := c.Kill(victim, "", 0); err != nil {
		t.Fatal(err)
	}
	fresh, err := c.AddServer(ctx, "s3")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := client("operator", "raft", "add-server", "s3", fresh.Raft); code != 0 {
		t.Fatalf("add-server: %d %q", code, out)
	}
	if code, out := client("operator", "raft", "remove-server", victim.ID); code != 0 {
		t.Fatalf("remove-server: %d %q", code, out)
	}
	var peers []api.Peer
	poll.Until(t, 20*time.Second, "three voters with the new one", func() bool {
		code, out := client("operator", "raft", "list-peers", "--json")
		if code != 0 || json.Unmarshal([]byte(out), &peers) != nil {
			return false
		}
		ids := []string{}
		for _, p := range peers {
			if p.Voter && p.Alive {
				ids = append(ids, p.ID)
			}
		}
		return len(peers) == 3 && strings.Contains(strings.Join(ids, ","), "s3") && len(ids) == 3
	})
	t.Logf("peers %+v", peers)

	// Kill another server: two of three remain, a quorum.
	leader, _, err = c.Leader(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing leader %s", leader.ID)
	if err := c.Kill(leader, "", 0); err != nil {
		t.Fatal(err)
	}
	// Removing a live server now would leave one live voter of two.
	var other *launch.Member
	for _, m := range live() {
		if m.ID != "s3" {
			other = m
		}
	}
	if _, _, err := c.Leader(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if code, _ := client("operator", "raft", "remove-server", other.ID); code != 2 {
		t.Errorf("removing a live server below quorum: exit %d, want 2 (refused)", code)
	}
	submit("after", "cifar10")
	poll.Until(t, 90*time.Second, "the job submitted after the replacement to complete", func() bool {
		code, j := jobState("after")
		return code == http.StatusOK && j.State == "completed"
	})
	if code, j := jobState("after"); j.Bid == nil || len(j.Bid.Single) == 0 {
		t.Errorf("completed job without its actor's bid: %d %+v", code, j)
	}
}
