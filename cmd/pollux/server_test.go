package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"pollux/actors/api"
	"pollux/actors/launch"
	"pollux/testbed/builtin"
)

// TestClusterSurvivesLeaderAndAgentKill runs 3 servers and 2 agents as separate
// processes, submits a small workload, SIGKILLs the Raft leader and then
// an agent mid-run, and checks that every job completes exactly once, that the GPUs were
// never over-committed and that batch sizes adapted.
func TestClusterSurvivesLeaderAndAgentKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	dir := t.TempDir()
	c, err := launch.Start(ctx, launch.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Dir: dir,
		Servers: 3, Agents: 2, GPUsPerAgent: 4, Interval: time.Second, TimeScale: 400})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(30 * time.Second)
		}
		if t.Failed() {
			for _, p := range append(c.Servers, c.Agents...) {
				b, _ := os.ReadFile(p.Log)
				t.Logf("--- %s log (last 3000 bytes)\n%s", p.Name, tail(b, 3000))
			}
		}
	}()
	jobs := []launch.Job{{Name: "cifar-1", App: "cifar10"}, {Name: "cifar-2", App: "cifar10"},
		{Name: "ds-1", App: "deepspeech2", After: time.Second}, {Name: "cifar-3", App: "cifar10", After: 2 * time.Second}}
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	var agentKilled time.Time
	var replaced time.Duration
	agentWasAlive := false
	var overCommit []api.Node
	res, err := c.Run(ctx, cat, jobs, launch.RunOptions{TimeScale: 400, Tick: 250 * time.Millisecond,
		OnTick: func(elapsed time.Duration) {
			if ns, err := c.Nodes(ctx); err == nil {
				for _, n := range ns {
					if n.Used > n.GPUs {
						overCommit = append(overCommit, n)
					}
				}
			}
			if !killed && elapsed > 5*time.Second {
				if p, err := c.Leader(ctx); err == nil {
					t.Logf("killing leader %s after %v", p.Name, elapsed)
					c.Kill(p)
					killed = true
				}
			}
			if killed && agentKilled.IsZero() && elapsed > 8*time.Second {
				ns, err := c.Nodes(ctx)
				for _, n := range ns {
					agentWasAlive = agentWasAlive || (err == nil && n.ID == c.Agents[1].Name && n.Health == "alive")
				}
				t.Logf("killing agent %s after %v; nodes %+v", c.Agents[1].Name, elapsed, ns)
				c.Kill(c.Agents[1])
				agentKilled = time.Now()
			}
			if !agentKilled.IsZero() && replaced == 0 {
				ns, err := c.Nodes(ctx)
				for _, n := range ns {
					if err == nil && n.ID == c.Agents[1].Name && n.Health == "dead" && n.Used == 0 {
						replaced = time.Since(agentKilled)
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
		t.Logf("agent %s was not alive in the state when killed (a false suspicion under load): no timing", c.Agents[1].Name)
	case replaced == 0:
		// The re-placement time target (10 s) is measured by pollux chaos
		// (docs/reliability.md), not asserted here: under a loaded CI
		// machine running -race builds it is not a correctness property.
		t.Errorf("dead agent's GPUs never released")
	default:
		t.Logf("the dead agent's GPUs were released %v after the kill", replaced)
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
	stopped = true
	if err := c.Stop(30 * time.Second); err != nil {
		t.Error(err)
	}
	for _, j := range jobs {
		if pids := processesWithEnv("POLLUX_JOB_ID=" + j.Name); len(pids) > 0 {
			t.Errorf("workers of %s still running: %v", j.Name, pids)
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
