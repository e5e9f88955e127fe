package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"pollux/internal/rootgate"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/netns"
	"pollux/testbed/chaos/record"
	"pollux/testbed/launch"
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
			res, err := c.sys.Root.RequestFuture(actor.NewPID(actorAddr, pb.NodeActor), m, 5*time.Second).Result()
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
}

// TestPartitionedAgentWritesNoSupersededCheckpoint cuts the agent that
// runs a job off from every other process (network namespaces) for long
// enough that the majority restarts the job on the other agent, then
// heals the network and lets the job complete. Judged from the workers'
// own records: the checker finds nothing (no stale checkpoint restored,
// no progress lost), and, stricter, no incarnation began writing a
// checkpoint after a newer one had restored: the cut-off worker was
// paused when its lease lapsed, before its successor started, and killed
// once the network healed. Without the agents' leases the cut-off worker
// trains on and checkpoints into the shared directory meanwhile.
func TestPartitionedAgentWritesNoSupersededCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	if err := netns.Available(); err != nil {
		rootgate.Skip(t, "network namespaces unavailable: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir,
		Servers: 3, Agents: 2, GPUsPerAgent: 1, Interval: time.Second, TimeScale: 200, Network: launch.Namespaces,
		Observe: true, Scenario: "agent-partition"})
	defer c.finish()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	const job = "lease-1"
	spec, err := launch.Job{Name: job, App: "cifar10"}.Spec(cat, 1)
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	if a := cl.SubmitAny(ctx, job, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
		t.Fatalf("submit: %s", a.Error())
	}
	worker := func(match func(launch.Worker) bool) (launch.Worker, bool) {
		for _, w := range c.Workers() {
			if w.Job == job && w.Rank == 0 && match(w) {
				return w, true
			}
		}
		return launch.Worker{}, false
	}
	first := waitWorker(t, "the job's first worker", 60*time.Second, func() (launch.Worker, bool) {
		return worker(func(launch.Worker) bool { return true })
	})
	waitCheckpoints(t, dir, job, first.Inc, 1) // it trains and checkpoints
	var rest []string
	for _, m := range append(c.Servers, c.Agents...) {
		if m.ID != first.Node {
			rest = append(rest, m.ID)
		}
	}
	cut := time.Now()
	if err := c.Net().Partition(ctx, [][]string{{first.Node}, rest}); err != nil {
		t.Fatal(err)
	}
	second := waitWorker(t, "the job restarted on the other agent", 60*time.Second, func() (launch.Worker, bool) {
		return worker(func(w launch.Worker) bool { return w.Inc > first.Inc && w.Node != first.Node })
	})
	t.Logf("agent %s cut off; incarnation %d started on %s %v later", first.Node, second.Inc, second.Node, time.Since(cut).Round(time.Millisecond))
	// Long enough for the cut-off worker to have written several
	// checkpoints, had it run on: its successor writes three.
	waitCheckpoints(t, dir, job, second.Inc, 3)
	if err := c.Net().Heal(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		j, found, err := cl.JobAny(ctx, job)
		if err == nil && found && j.State == "completed" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("job %s did not complete: %+v, %v", job, j, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, stale, err := cl.JobsAny(ctx); err != nil || stale {
		t.Errorf("final read: stale %v, %v", stale, err)
	}
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, first.Node+".log")); !strings.Contains(string(b), "LEASE LAPSED") {
		t.Errorf("agent %s never reports its lease lapsed", first.Node)
	}
	judged := judgeDir(t, dir)
	if fs := judged.Failures(); len(fs) > 0 {
		t.Errorf("the observers' records show failures: %q", fs)
	}
	ws, err := record.ReadRoot(filepath.Join(dir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range supersededWrites(ws, job) {
		t.Error(v)
	}
}

// waitWorker polls find until it finds a worker.
func waitWorker(t *testing.T, what string, d time.Duration, find func() (launch.Worker, bool)) launch.Worker {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if w, ok := find(); ok {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCheckpoints waits until the records under dir show n checkpoints
// written by incarnation inc of job.
func waitCheckpoints(t *testing.T, dir, job string, inc uint64, n int) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(60 * time.Second); got < n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("incarnation %d of %s wrote %d checkpoints within 60 s, want %d", inc, job, got, n)
		}
		ws, err := record.ReadRoot(filepath.Join(dir, "records"))
		if err != nil {
			continue // a record being written
		}
		got = 0
		for _, w := range ws {
			for _, r := range w.Records {
				if r.Job == job && r.Inc == inc && r.Kind == record.Checkpoint {
					got++
				}
			}
		}
	}
}

// supersededWrites lists the checkpoints of job that an incarnation began
// writing after a newer incarnation had restored (whether or not anyone
// read them later).
func supersededWrites(ws []record.Worker, job string) []string {
	type ev struct {
		inc   uint64
		t0, t int64
		node  string
	}
	var writes, restores []ev
	var epoch int64
	for _, w := range ws {
		for _, r := range w.Records {
			if r.Job != job {
				continue
			}
			if epoch == 0 || r.T < epoch {
				epoch = r.T
			}
			switch r.Kind {
			case record.Checkpoint:
				writes = append(writes, ev{r.Inc, r.T0, r.T, w.Node})
			case record.Restore:
				restores = append(restores, ev{r.Inc, r.T0, r.T, w.Node})
			}
		}
	}
	var out []string
	for _, w := range writes {
		if i := slices.IndexFunc(restores, func(r ev) bool { return r.inc > w.inc && r.t < w.t0 }); i >= 0 {
			r := restores[i]
			out = append(out, fmt.Sprintf("incarnation %d on %s began a checkpoint at %s, after incarnation %d on %s had restored at %s",
				w.inc, w.node, mono.Seconds(w.t0, epoch), r.inc, r.node, mono.Seconds(r.t, epoch)))
		}
	}
	return out
}
