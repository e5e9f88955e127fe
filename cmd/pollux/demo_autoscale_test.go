package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/cluster/provider"
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
	err := runAutoscaleDemo(ctx, &out, &progress, autoscaleDemoOpts{servers: 3, gpus: 4, maxNodes: 3, scale: 300, cost: 2,
		spread: 20 * time.Second, timeout: 7 * time.Minute, boot: time.Second, settle: 2 * time.Minute, dir: dir, keep: true,
		asJSON: true, exec: selfExec, env: []string{"POLLUX_TEST_PROCESS=1"}})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, tail(progress.Bytes(), 4000))
	}
	var sum autoscaleSummary
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
