package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"pollux/testbed/failover"
)

// TestConsensusMemberProcess is not a test: TestBenchFailover re-executes
// the test binary with it selected to run one server process.
func TestConsensusMemberProcess(t *testing.T) {
	if os.Getenv("POLLUX_CONSENSUS_MEMBER") != "1" {
		t.Skip("helper process of TestBenchFailover")
	}
	i := slices.Index(os.Args, "--")
	if i < 0 {
		t.Fatal("no -- in the arguments")
	}
	os.Exit(run(os.Args[i+1:]))
}

func testMember(args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestConsensusMemberProcess$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "POLLUX_CONSENSUS_MEMBER=1")
	return cmd
}

func TestBenchFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := failover.Options{Servers: 3, Trials: 2, Allocs: 300, Batch: 64,
		Heartbeat: 200 * time.Millisecond, Election: 200 * time.Millisecond, Lease: 100 * time.Millisecond, Member: testMember}
	rep, err := failover.Run(ctx, o, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Trials != 2 || len(rep.SamplesS) != 2 || rep.Allocations != 300 || !(rep.AllocsPerS > 0) {
		t.Fatalf("report %+v", rep)
	}
	// A kill cannot be noticed before the election timeout, and the
	// benchmark gives up after 30 s.
	for _, s := range rep.SamplesS {
		if s < o.Election.Seconds() || s > 30 {
			t.Fatalf("failover sample %.3f s outside [%.1f, 30]", s, o.Election.Seconds())
		}
	}
	if !(rep.MinS <= rep.MedianS && rep.MedianS <= rep.P95S && rep.P95S <= rep.MaxS) {
		t.Fatalf("order statistics out of order: %+v", rep)
	}
}

func TestBenchFailoverBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "failover", "--servers", "2"},
		{"bench", "failover", "--trials", "0"},
		{"bench", "failover", "--lease", "1s"},
		{"bench", "failover", "--batch", "0"},
		{"bench", "failover", "extra"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
