package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"pollux/actors/api"
	"pollux/actors/launch"
)

// TestClusterSurvivesLeaderKill runs 3 servers and 2 agents as separate
// processes, submits a small workload, SIGKILLs the Raft leader mid-run
// and checks that every job completes exactly once, that the GPUs were
// never over-committed and that batch sizes adapted.
func TestClusterSurvivesLeaderKill(t *testing.T) {
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
	jobs := map[string]string{"cifar-1": "cifar10", "cifar-2": "cifar10", "ds-1": "deepspeech2", "cifar-3": "cifar10"}
	for name, app := range jobs {
		spec := fmt.Sprintf("name: %s\napplication: %s\nmax_replicas: 8\n", name, app)
		switch app {
		case "cifar10":
			spec += "init_batch_size: 128\nmax_batch_size: 4096\nmin_local_batch_size: 32\nmax_local_batch_size: 1024\naccumulation: true\n"
		case "deepspeech2":
			spec += "init_batch_size: 20\nmax_batch_size: 640\nmin_local_batch_size: 10\nmax_local_batch_size: 80\naccumulation: true\n"
		}
		if err := c.Submit(ctx, []byte(spec)); err != nil {
			t.Fatal(err)
		}
	}
	killed := false
	begin := time.Now()
	var final []api.Job
	for final == nil {
		if ctx.Err() != nil {
			js, _ := c.Jobs(context.Background())
			t.Fatalf("jobs not all completed after %v: %+v", time.Since(begin), js)
		}
		if st, err := c.Status(ctx); err == nil && st.GPUsUsed > st.GPUs {
			t.Errorf("GPUs over-committed: %+v", st)
		}
		if !killed && time.Since(begin) > 5*time.Second {
			if p, err := c.Leader(ctx); err == nil {
				t.Logf("killing leader %s", p.Name)
				c.Kill(p)
				killed = true
			}
		}
		if js, err := c.Jobs(ctx); err == nil {
			done := 0
			for _, j := range js {
				if j.State == "completed" {
					done++
				}
				if j.State == "failed" {
					t.Fatalf("job %s failed: %s", j.ID, j.Reason)
				}
			}
			if done == len(jobs) && killed {
				final = js
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("all %d jobs completed %v after submission", len(jobs), time.Since(begin))
	if len(final) != len(jobs) {
		t.Errorf("%d jobs listed, want %d", len(final), len(jobs))
	}
	adapted := false
	for _, j := range final {
		if j.FinishTime <= 0 {
			t.Errorf("job %s completed without a finish time", j.ID)
		}
		for _, p := range j.Profiled {
			if p.Replicas*p.LocalBatch > j.InitBatch {
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
	for name := range jobs {
		if pids := processesWithEnv("POLLUX_JOB_ID=" + name); len(pids) > 0 {
			t.Errorf("workers of %s still running: %v", name, pids)
		}
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
