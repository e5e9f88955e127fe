package main

import (
	"context"
	"os"
	"testing"

	"pollux/testbed/chaos/attack"
)

// TestAttackScenarioTenants runs the attacks of one tenant on another
// (checkpoint squatting, resuming another's job, report-token theft,
// a reused job name, quotas, the submission rate spread over the
// servers, an idempotent retry under a spent rate, the state budget, a
// link in the checkpoint root) and the
// report attacks that read a victim worker's token from its file: each
// is refused on the refusing side, and a normal job completes after.
func TestAttackScenarioTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and attacks it")
	}
	only := []string{"checkpoint-squatting-a-live-jobs-directory", "checkpoint-squatting-a-future-jobs-directory",
		"resume-from-another-tenants-job", "report-token-theft-between-jobs", "reused-job-name-getting-a-pruned-jobs-checkpoints",
		"quota-submissions-per-second", "submit-rate-spread-over-servers", "idempotent-retry-spends-no-rate-token", "quota-spec-bytes", "quota-running-and-pending-jobs", "state-budget-full", "checkpoint-symlink-swap", "checkpoint-dir-symlink-out-of-the-root",
		"done-from-rank-1"}
	res := runAttackCases(t, only)
	if !res.Pass() || res.Attacks != len(only) {
		t.Errorf("%d attacks, %d refused, after: %v", res.Attacks, res.Refused, res.After)
	}
}

// runAttackCases runs the attack suite's cases named only, removes its
// directory, and fails t for each case not refused (logging how each
// refused one was).
func runAttackCases(t *testing.T, only []string) *attack.Result {
	t.Helper()
	res, err := attack.Run(context.Background(), attack.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"},
		Logger: testLogger(t), Only: only})
	if err != nil {
		t.Fatal(err)
	}
	if res.Dir != "" {
		t.Cleanup(func() { os.RemoveAll(res.Dir) })
	}
	for _, name := range only {
		c, ok := res.Cases[name]
		if !ok || !c.Refused {
			t.Errorf("case %s: %+v", name, c)
		} else {
			t.Logf("%s: %s", name, c.How)
		}
	}
	return res
}
