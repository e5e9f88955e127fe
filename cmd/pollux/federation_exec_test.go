package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/cluster/federation"
	"pollux/testbed/builtin"
	"pollux/testbed/fedlab"
	"pollux/testbed/launch"
)

// logTime is the time= field of a log line.
func logTime(t *testing.T, line string) time.Time {
	t.Helper()
	at, ok := fedlab.LineTime(line)
	if !ok {
		t.Fatalf("log line without a time: %s", line)
	}
	return at
}

// Two labs of one server and one agent of 2 GPUs each: lab-a's jobs want
// more than its GPUs while lab-b is idle, so lab-b lends its node; a job
// of lab-a runs workers on lab-b's agent (seen in that agent's log,
// started by lab-b's control plane) and completes in lab-a; then a job
// of lab-b makes lab-b reclaim its node: lab-a's workers there are asked
// to stop, and lab-b's job runs there and completes.
func TestFederatedJobsOnBorrowedGPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two labs of processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	names, dir := []string{"lab-a", "lab-b"}, t.TempDir()
	ls, err := fedlab.Start(ctx, launch.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Dir: dir,
		Servers: 1, Agents: 1, GPUsPerAgent: 2, Interval: time.Second, TimeScale: 200},
		names, federation.Quota{Nominal: 2, LendingLimit: 2, BorrowingLimit: 2}, 500*time.Millisecond)
	labsStopped := false
	defer func() {
		if labsStopped {
			return
		}
		if t.Failed() {
			for _, n := range names {
				if c := ls.Labs[n]; c != nil {
					for _, m := range append(c.Servers, c.Agents...) {
						b, _ := os.ReadFile(m.Log)
						t.Logf("--- %s %s log (last 4000 bytes)\n%s", n, m.ID, tail(b, 4000))
					}
				}
			}
		}
		if err := ls.Stop(); err != nil {
			t.Errorf("stopping the labs: %v", err)
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	labs := ls.Labs
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	submit := func(lab, name string) {
		spec, err := launch.Job{Name: name, App: "cifar10"}.Spec(cat, 4)
		if err != nil {
			t.Fatal(err)
		}
		if a := labs[lab].Client().SubmitAny(ctx, name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
			t.Fatalf("submitting %s to %s: %s", name, lab, a.Error())
		}
	}
	jobs := func(lab string) map[string]api.Job {
		js, _, err := labs[lab].Client().JobsAny(ctx)
		if err != nil {
			return nil
		}
		out := map[string]api.Job{}
		for _, j := range js {
			out[j.ID] = j
		}
		return out
	}
	aJobs := []string{"a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7", "a-8"}
	for _, j := range aJobs {
		submit("lab-a", j)
	}
	agentB, serverB := labs["lab-b"].Agents[0].Log, labs["lab-b"].Servers[0].Log
	// A job of lab-a runs on lab-b's agent and completes in lab-a, while
	// another, not completed, runs there.
	ranThere := map[string]bool{}
	var completedThere, runningThere string
	for completedThere == "" || runningThere == "" {
		if ctx.Err() != nil {
			t.Fatalf("no job of lab-a ran on lab-b's agent and completed while another ran there (ran there: %v, completed %q)", ranThere, completedThere)
		}
		for _, j := range aJobs {
			if len(fedlab.LogLines(agentB, "node: worker started", "job="+j+" ")) > 0 {
				ranThere[j] = true
			}
		}
		js := jobs("lab-a")
		runningThere = ""
		for _, j := range aJobs {
			if js[j].State != "completed" && len(fedlab.LogLines(agentB, "node: worker started", "job="+j+" ")) > len(fedlab.LogLines(agentB, "node: worker exited", "job="+j+" ")) {
				runningThere = j
			}
		}
		for j := range ranThere {
			if js[j].State == "failed" {
				t.Fatalf("job %s failed: %s", j, js[j].Reason)
			}
			if js[j].State == "completed" {
				completedThere = j
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("lab-a's job %s ran on lab-b's agent and completed; %s runs there; ran there: %v", completedThere, runningThere, ranThere)
	if refused := fedlab.LogLines(labs["lab-a"].Servers[0].Log, "federation: refused"); len(refused) > 0 {
		t.Errorf("lab-a refused: %v", refused)
	}
	if refused := fedlab.LogLines(serverB, "federation: refused"); len(refused) > 0 {
		t.Errorf("lab-b refused: %v", refused)
	}
	// lab-b's own job: lab-b reclaims its node and its job runs there.
	submit("lab-b", "b-1")
	for len(fedlab.LogLines(agentB, "node: worker started", "job=b-1 ")) == 0 {
		if ctx.Err() != nil {
			t.Fatal("lab-b's job never started on its own agent")
		}
		time.Sleep(250 * time.Millisecond)
	}
	reclaims := fedlab.LogLines(serverB, "federation: lease", "op=reclaim", "reason=need")
	if len(reclaims) == 0 {
		t.Fatalf("lab-b's job started without a reclaim (lab-a's jobs had left already?)")
	}
	// After the reclaim no worker of lab-a starts on lab-b's agent (the
	// lease is not granted again within the cooldown), and those running
	// there were asked to stop.
	reclaimAt := logTime(t, reclaims[0])
	for _, line := range fedlab.LogLines(agentB, "node: worker started", "job=a-") {
		if logTime(t, line).After(reclaimAt) {
			t.Errorf("a worker of lab-a started on lab-b's agent after the reclaim at %v: %s", reclaimAt, line)
		}
	}
	t.Logf("reclaim: %s", reclaims[0])
	stopped := fedlab.LogLines(agentB, "node: worker exited", "job=a-", "requested=true")
	for _, line := range stopped {
		t.Logf("stopped on lab-b's agent: %s", line)
	}
	if len(stopped) == 0 {
		t.Errorf("no worker of lab-a on lab-b's agent was asked to stop (%s ran there before lab-b's job)", runningThere)
	}
	for _, want := range []struct {
		lab string
		ids []string
	}{{"lab-b", []string{"b-1"}}, {"lab-a", aJobs}} {
		for {
			js, done := jobs(want.lab), 0
			for _, id := range want.ids {
				switch js[id].State {
				case "completed":
					done++
				case "failed":
					t.Fatalf("%s's job %s failed: %s", want.lab, id, js[id].Reason)
				}
			}
			if done == len(want.ids) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s's jobs did not all complete: %v", want.lab, js)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// Every process stopped: the labs' servers and agents, and every
	// worker of either lab's jobs.
	labsStopped = true
	if err := ls.Stop(); err != nil {
		t.Errorf("stopping the labs: %v", err)
	}
	for _, j := range append(aJobs, "b-1") {
		if pids := workersIn(dir, "POLLUX_JOB_ID="+j); len(pids) > 0 {
			t.Errorf("workers of %s still running: %v", j, pids)
		}
	}
	// Under go test -race the processes are race-enabled too.
	for _, n := range names {
		for _, m := range append(ls.Labs[n].Servers, ls.Labs[n].Agents...) {
			if races := fedlab.LogLines(m.Log, "DATA RACE"); len(races) > 0 {
				b, _ := os.ReadFile(m.Log)
				t.Errorf("%s %s: a data race:\n%s", n, m.ID, tail(b, 6000))
			}
		}
	}
}

// pollux demo --federation refuses the flags of the other demos.
func TestDemoFederationBadFlags(t *testing.T) {
	for _, flag := range []string{"--real", "--ui", "--autoscale", "--json"} {
		code, stderr := runPollux(t, "demo", "--federation", flag)
		if code != 2 || !strings.Contains(stderr, flag+" cannot be used with --federation") {
			t.Errorf("demo --federation %s: exit %d:\n%s", flag, code, stderr)
		}
	}
}
