package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"pollux/actors/api"
	"pollux/actors/launch"
	"pollux/testbed/builtin"
)

// runOut runs the pollux command line in this process and returns its
// exit status and standard output.
func runOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(args)
	err := root.Execute()
	switch {
	case err == nil:
		return 0, out.String()
	case isUsage(err):
		t.Logf("pollux %v: %v", args, err)
		return 2, out.String()
	}
	t.Logf("pollux %v: %v", args, err)
	return 1, out.String()
}

func isUsage(err error) bool {
	var ue usageError
	return errors.As(err, &ue)
}

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
	c, err := launch.Start(ctx, launch.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Dir: dir,
		Servers: 3, Agents: 1, GPUsPerAgent: 2, Interval: 500 * time.Millisecond, TimeScale: 50, Retain: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Stop(30 * time.Second)
		if t.Failed() {
			for _, p := range append(c.Servers, c.Agents...) {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- %s log (last 3000 bytes)\n%s", p.Name, tail(b, 3000))
			}
		}
	}()
	servers := func() string {
		var hs []string
		for _, p := range c.Live() {
			hs = append(hs, p.HTTP)
		}
		return strings.Join(hs, ",")
	}
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
		if err := c.Submit(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	jobState := func(name string) (int, api.Job) {
		var j api.Job
		for _, p := range c.Live() {
			resp, err := http.Get("http://" + p.HTTP + api.PathJobs + "/" + name)
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
	until := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s", d, what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Cancel: a long job runs, is cancelled, its workers stop.
	submit("long", "bert")
	until("the long job's workers", 30*time.Second, func() bool { return len(processesWithEnv("POLLUX_JOB_ID=long")) > 0 })
	if code, out := runOut(t, "cancel", "long", "--server", servers()); code != 0 || !strings.Contains(out, "cancelled long") {
		t.Fatalf("cancel: %d %q", code, out)
	}
	// (a follower's answer may lag by a moment)
	until("the job listed as cancelled, without GPUs", 5*time.Second, func() bool {
		code, j := jobState("long")
		return code == http.StatusOK && j.State == "cancelled" && j.GPUs == 0
	})
	if code, _ := runOut(t, "cancel", "long", "--server", servers()); code != 2 {
		t.Errorf("cancelling a finished job: exit %d, want 2", code)
	}
	if code, _ := runOut(t, "cancel", "no-such-job", "--server", servers()); code != 2 {
		t.Errorf("cancelling an unknown job: exit %d, want 2", code)
	}
	until("the cancelled job's workers to stop", 30*time.Second, func() bool { return len(processesWithEnv("POLLUX_JOB_ID=long")) == 0 })
	// Retention: pruned after --retain.
	until("the cancelled job to be pruned", 30*time.Second, func() bool {
		code, _ := jobState("long")
		return code == http.StatusNotFound
	})

	// Replace a SIGKILLed server.
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim *launch.Process
	for _, p := range c.Servers {
		if p != leader {
			victim = p
			break
		}
	}
	t.Logf("killing follower %s", victim.Name)
	c.Kill(victim)
	fresh, err := c.AddServer(ctx, "s3")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := runOut(t, "operator", "raft", "add-server", "s3", fresh.Raft, "--server", servers()); code != 0 {
		t.Fatalf("add-server: %d %q", code, out)
	}
	if code, out := runOut(t, "operator", "raft", "remove-server", victim.Name, "--server", servers()); code != 0 {
		t.Fatalf("remove-server: %d %q", code, out)
	}
	var peers []api.Peer
	until("three voters with the new one", 20*time.Second, func() bool {
		code, out := runOut(t, "operator", "raft", "list-peers", "--json", "--server", servers())
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
	leader, err = c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing leader %s", leader.Name)
	c.Kill(leader)
	// Removing a live server now would leave one live voter of two.
	var live *launch.Process
	for _, p := range c.Live() {
		if p.Name != "s3" {
			live = p
		}
	}
	until("a new leader", 20*time.Second, func() bool { _, err := c.Leader(ctx); return err == nil })
	if code, _ := runOut(t, "operator", "raft", "remove-server", live.Name, "--server", servers()); code != 2 {
		t.Errorf("removing a live server below quorum: exit %d, want 2 (refused)", code)
	}
	submit("after", "cifar10")
	until("the job submitted after the replacement to complete", 90*time.Second, func() bool {
		code, j := jobState("after")
		return code == http.StatusOK && j.State == "completed"
	})
	if code, j := jobState("after"); j.Bid == nil || len(j.Bid.Single) == 0 {
		t.Errorf("completed job without its actor's bid: %d %+v", code, j)
	}
}
