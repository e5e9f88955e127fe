package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/record"
	"pollux/testbed/launch"
)

// TestClusterSurvivesLeaderAndAgentKill runs 3 servers and 2 agents as separate
// processes, submits a small workload, SIGKILLs the Raft leader and then
// an agent mid-run, and checks that every job completes, that batch sizes
// adapted, and, from the independent observers (the client history and
// the workers' own records), that no invariant broke.
func TestClusterSurvivesLeaderAndAgentKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir,
		Servers: 3, Agents: 2, GPUsPerAgent: 4, Interval: time.Second, TimeScale: 400, Observe: true, Scenario: "leader-and-agent-kill"})
	defer c.finish()
	jobs := []launch.Job{{Name: "cifar-1", App: "cifar10"}, {Name: "cifar-2", App: "cifar10"},
		{Name: "ds-1", App: "deepspeech2", After: time.Second}, {Name: "cifar-3", App: "cifar10", After: 2 * time.Second}}
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	killed := false
	var agentKilled time.Time
	var released time.Duration
	agentWasAlive := false
	var overCommit []api.Node
	victim := c.Agents[1]
	nodes := func() []api.Node {
		for _, m := range c.Servers {
			if m.Serving() {
				if ns, err := cl.Nodes(ctx, m, time.Second); err == nil {
					return ns
				}
			}
		}
		return nil
	}
	res, err := c.Run(ctx, cat, jobs, launch.RunOptions{TimeScale: 400, Tick: 250 * time.Millisecond,
		OnTick: func(elapsed time.Duration) {
			for _, n := range nodes() {
				if n.Used > n.GPUs {
					overCommit = append(overCommit, n)
				}
			}
			if !killed && elapsed > 5*time.Second {
				if m, _, err := c.Leader(ctx, time.Second); err == nil {
					t.Logf("killing leader %s after %v", m.ID, elapsed)
					if err := c.Kill(m, "", 0); err != nil {
						t.Error(err)
					}
					killed = true
				}
			}
			if killed && agentKilled.IsZero() && elapsed > 8*time.Second {
				ns := nodes()
				for _, n := range ns {
					agentWasAlive = agentWasAlive || (n.ID == victim.ID && n.Health == "alive")
				}
				t.Logf("killing agent %s after %v; nodes %+v", victim.ID, elapsed, ns)
				if err := c.Kill(victim, "", 0); err != nil {
					t.Error(err)
				}
				agentKilled = time.Now()
			}
			if !agentKilled.IsZero() && released == 0 {
				for _, n := range nodes() {
					if n.ID == victim.ID && n.Health == "dead" && n.Used == 0 {
						released = time.Since(agentKilled)
					}
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !killed || agentKilled.IsZero() {
		t.Error("the workload finished before the leader and an agent could be killed")
	}
	switch {
	case !agentWasAlive:
		t.Logf("agent %s was not alive in the state when killed (a false suspicion under load): no timing", victim.ID)
	case released == 0:
		// The re-placement time target (10 s) is measured by pollux chaos
		// (docs/reliability.md), not asserted here: under a loaded CI
		// machine running -race builds it is not a correctness property.
		t.Errorf("dead agent's GPUs never released")
	default:
		t.Logf("the dead agent's GPUs were released %v after the kill", released)
	}
	if len(overCommit) > 0 {
		t.Errorf("GPUs over-committed: %+v", overCommit)
	}
	var table strings.Builder
	if err := launch.WriteResults(&table, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("results:\n%s", table.String())
	if len(res) != len(jobs) {
		t.Errorf("%d results, want %d", len(res), len(jobs))
	}
	adapted := false
	for _, r := range res {
		if r.Job.FinishTime <= 0 || !(r.JCT > 0) {
			t.Errorf("job %s: finish %v, JCT %v", r.Job.ID, r.Job.FinishTime, r.JCT)
		}
		for _, p := range r.Job.Profiled {
			if p.Replicas*p.LocalBatch > r.Job.InitBatch {
				adapted = true
			}
		}
	}
	if !adapted {
		t.Error("no job ran at a batch above its initial one")
	}
	// A last linearizable read for the checker, then stop everything.
	if _, stale, err := cl.JobsAny(ctx); err != nil || stale {
		t.Errorf("final read: stale %v, %v", stale, err)
	}
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	for _, j := range jobs {
		if pids := workersIn(dir, "POLLUX_JOB_ID="+j.Name); len(pids) > 0 {
			t.Errorf("workers of %s still running: %v", j.Name, pids)
		}
	}
	judged := judgeDir(t, dir)
	if fs := judged.Failures(); len(fs) > 0 {
		t.Errorf("the observers' records show failures: %q", fs)
	}
	if o := judged.Outcomes; o.Submitted != len(jobs) || o.Completed != len(jobs) {
		t.Errorf("outcomes %+v", o)
	}
}

// judgeDir checks a stopped, observed cluster's history and worker
// records.
func judgeDir(t *testing.T, dir string) *check.Result {
	t.Helper()
	lines, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ws, err := record.ReadRoot(filepath.Join(dir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) == 0 {
		t.Fatal("no worker wrote a record")
	}
	res, err := check.Check(check.Input{History: lines, Workers: ws}, check.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
