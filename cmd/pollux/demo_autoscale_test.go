package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/cluster/provider"
	"pollux/testbed/builtin"
	"pollux/testbed/demo"
	"pollux/testbed/launch"
)

// `pollux demo --autoscale --json` through real processes: it starts
// with one agent, the servers' local provider adds agents while the jobs
// arrive (each certified by the cluster CA) and removes them as they
// finish; every job completes; nothing is left running. The node counts
// are the demo's samples of the agent processes, checked here against
// the provider's directory and the agents' own logs.
func TestDemoAutoscale(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process demo")
	}
	dir := filepath.Join(t.TempDir(), "run")
	var out, progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	err := demo.Autoscale(ctx, demo.AutoscaleOptions{Servers: 3, GPUs: 4, MaxNodes: 3, Scale: 300, Cost: 2,
		Spread: 20 * time.Second, Timeout: 7 * time.Minute, Boot: time.Second, Settle: 2 * time.Minute, Dir: dir, Keep: true,
		JSON: true, Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}}, &out, &progress)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, tail(progress.Bytes(), 4000))
	}
	var sum demo.AutoscaleSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if sum.Jobs != 12 || sum.Completed != 12 || sum.Lost != 0 {
		t.Errorf("jobs %d, completed %d, lost %d", sum.Jobs, sum.Completed, sum.Lost)
	}
	if sum.StartNodes != 1 || sum.PeakNodes < 2 || sum.PeakNodes > 3 || sum.FinalNodes != 1 || len(sum.Added) == 0 {
		t.Errorf("nodes: start %d, peak %d, final %d, added %v", sum.StartNodes, sum.PeakNodes, sum.FinalNodes, sum.Added)
	}
	if sum.ProcessesLeft != 0 || len(provider.Running(filepath.Join(dir, "autoscale"))) != 0 {
		t.Errorf("processes left: %d", sum.ProcessesLeft)
	}
	if want := sum.NodeHours * 2; sum.NodeHours <= 0 || sum.Cost != want {
		t.Errorf("node-hours %v, cost %v", sum.NodeHours, sum.Cost)
	}
	// Every agent the servers added ran with its own certificate and
	// stopped: its log says it was ready and that it left.
	for _, name := range sum.Added {
		b, err := os.ReadFile(filepath.Join(dir, "autoscale", name, "agent.log"))
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if strings.Count(log, "agent: ready") != 1 {
			t.Errorf("%s started %d times:\n%s", name, strings.Count(log, "agent: ready"), tail(b, 2000))
		}
		if _, err := os.Stat(filepath.Join(dir, "autoscale", name, "tls", "agent-"+name+".pem")); err != nil {
			t.Errorf("%s has no certificate of its own: %v", name, err)
		}
	}
}

// The leader is killed while its local provider boots the agents it
// asked for (during the boot delay), through real processes: the new
// leader finds the decision committed and never starts those agents
// again (it waits for them to join, gives them up after the join
// timeout, and asks for new ones under new names); every job completes.
// Observed from outside: each agent directory's log shows at most one
// start, and the processes themselves.
func TestAutoscaleLeaderKilledDuringScaleUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a multi-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir, Servers: 3, Agents: 1,
		GPUsPerAgent: 4, TimeScale: 100, Autoscale: &launch.Autoscale{MinNodes: 1, MaxNodes: 3, BootDelay: 3 * time.Second, JoinTimeout: 15 * time.Second}})
	defer func() {
		c.finish()
		if left := provider.Running(c.AutoscaleDir()); len(left) > 0 {
			t.Errorf("agents left running: %v", left)
		}
	}()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	var ids []string
	for i := range 4 {
		j := launch.Job{Name: fmt.Sprintf("cifar10-%d", i), App: "cifar10"}
		spec, err := j.Spec(cat, 16)
		if err != nil {
			t.Fatal(err)
		}
		if a := cl.SubmitAny(ctx, j.Name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
			t.Fatalf("submitting %s: %s", j.Name, a.Error())
		}
		ids = append(ids, j.Name)
	}
	// The first scale-up: a leader asks its provider for machines.
	var leader *launch.Member
	var asked []string
	deadline := time.Now().Add(2 * time.Minute)
	for leader == nil {
		for _, m := range c.Servers {
			b, _ := os.ReadFile(m.Log)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "allocator: asking the provider for a machine") {
					leader = m
					_, name, _ := strings.Cut(line, "node=")
					asked = append(asked, strings.Fields(name)[0])
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no scale-up within 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Kill(leader, "", 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s while it booted %v", leader.ID, asked)
	// Every job completes on what the new leader runs.
	for {
		js, _, err := cl.JobsAny(ctx)
		done := 0
		for _, j := range js {
			if j.State == "completed" {
				done++
			} else if j.State == "failed" || j.State == "cancelled" {
				t.Fatalf("job %s %s: %s", j.ID, j.State, j.Reason)
			}
		}
		if err == nil && done == len(ids) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("jobs not done: %d of %d (%v)", done, len(ids), err)
		}
		time.Sleep(time.Second)
	}
	// No agent was started twice: one ready line per agent directory.
	ents, _ := os.ReadDir(c.AutoscaleDir())
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(c.AutoscaleDir(), e.Name(), "agent.log"))
		if n := strings.Count(string(b), "agent: ready"); n > 1 {
			t.Errorf("agent %s started %d times", e.Name(), n)
		}
	}
	// The new leader never asked for the machines the dead one had: each
	// either booted before the kill (started once) or was given up.
	var others string
	for _, m := range c.Servers {
		if m == leader {
			continue
		}
		b, _ := os.ReadFile(m.Log)
		others += string(b)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "allocator: cluster size decided") || strings.Contains(line, "allocator: machine") ||
				strings.Contains(line, "allocator: asking the provider") {
				t.Log(line)
			}
		}
		for _, name := range asked {
			if strings.Contains(string(b), "asking the provider for a machine\" server="+m.ID+" node="+name+"\n") {
				t.Errorf("%s asked again for %s", m.ID, name)
			}
		}
	}
	for _, name := range asked {
		b, _ := os.ReadFile(filepath.Join(c.AutoscaleDir(), name, "agent.log"))
		started := strings.Count(string(b), "agent: ready") == 1
		gaveUp := strings.Contains(others, "node="+name+" why=\"did not join within 15s\"")
		if started == gaveUp {
			t.Errorf("%s: started %v, given up %v (want one of them)", name, started, gaveUp)
		}
	}
}
