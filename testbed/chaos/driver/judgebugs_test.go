//go:build judgebugs

package driver

import (
	"context"
	"slices"
	"testing"
	"time"

	"pollux/internal/judgebugs"
	"pollux/internal/testbin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/schedule"
)

// TestJudgeCatchesPlantedBugs runs one short scenario (a leader kill and
// a worker kill under four jobs) on a pollux built with the judgebugs
// tag: once planting no bug, which must pass, and once per planted bug
// (package judgebugs), which the judge must report by the violation the
// bug causes: a dropped completion leaves its job lost, a stale
// allocation runs a completed job again (ran-after-finish), a stale
// read answered as fresh breaks linearizability.
func TestJudgeCatchesPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pollux and runs five-process clusters")
	}
	bin := testbin.Build(t, "judgebugs")
	sc := schedule.Scenario{Name: "planted", Counts: []schedule.Count{{Kind: schedule.LeaderKill, N: 1}, {Kind: schedule.WorkerKill, N: 1}}}
	has := func(inv check.Invariant) func(*check.Result) bool {
		return func(c *check.Result) bool {
			return slices.ContainsFunc(c.Violations, func(v check.Violation) bool { return v.Invariant == inv })
		}
	}
	for _, tc := range []struct {
		bug    judgebugs.Bug
		caught func(*check.Result) bool
	}{
		{"", nil},
		{judgebugs.DropCompletion, func(c *check.Result) bool { return c.Outcomes.Lost > 0 }},
		{judgebugs.StaleAllocation, has(check.RanAfterFinish)},
		{judgebugs.StaleRead, has(check.Linearizable)},
	} {
		name := string(tc.bug)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			// The run's directory in the test's artifacts: a run that
			// fails (as a planted bug's must) keeps its directory, which
			// a temporary one of the driver's would leave in /tmp.
			o := Options{Dir: t.ArtifactDir(), Exec: []string{bin}, Env: []string{judgebugs.Env + "=" + string(tc.bug)}, Servers: 3, Agents: 2, GPUsPerAgent: 2,
				TimeScale: 400, Converge: 150 * time.Second, Jobs: 4, Cancels: -1,
				Schedule: schedule.Options{Gap: 1500 * time.Millisecond, ElectionTimeout: time.Second, ServerDown: time.Second,
					AgentDown: 4 * time.Second, AgentRestartDown: 200 * time.Millisecond, NetDown: 2 * time.Second}}
			res, err := Run(ctx, sc, 5, o)
			if err != nil {
				t.Fatalf("run not judged: %v", err)
			}
			fails := res.Failures()
			for _, f := range fails {
				t.Logf("failure: %s", f)
			}
			switch {
			case tc.caught == nil && len(fails) > 0:
				t.Errorf("without a planted bug the run failed (%d failures)", len(fails))
			case tc.caught != nil && (res.Check == nil || !tc.caught(res.Check)):
				t.Errorf("planted bug %s not reported by the violation it causes", tc.bug)
			}
		})
	}
}
