package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/labloss"
	"pollux/testbed/chaos/suite"
)

// The whole scenario on this machine, with a short lease: three labs,
// the loss of lab-b while it borrows from lab-a and lends to lab-c, its
// restart; it must pass.
func TestChaosLabLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three labs of processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := labloss.Run(ctx, labloss.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Dir: t.TempDir(), Seed: 1,
		TimeScale: 100, TTL: 5 * time.Second, Converge: 2 * time.Minute, LogLevel: "warn", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	t.Logf("%s", b)
	if !res.Pass() {
		t.Fatalf("lab-loss failed: %q", res.Failures)
	}
	if res.LostLab != "lab-b" || res.BorrowedWorkersAtLoss == 0 || res.LeasesAtLoss < 2 || res.LostLabToResume == 0 ||
		res.LostLabLentAtLoss == 0 || res.LostLabBorrowedAtLoss == 0 || res.PeerWorkersAtLoss == 0 || res.PeerJobsResumed == 0 ||
		res.PeerJobsResumed != res.PeerJobsToResume ||
		res.JobsSubmitted == 0 || res.JobsCompleted != res.JobsSubmitted || res.LostLabCompleted != res.LostLabJobs {
		t.Errorf("the run did not exercise the loss of a lab that lends and borrows, with jobs to resume on both sides: %s", b)
	}
	if res.LeaseExpiryMaxS <= 0 || res.LeaseExpiresMaxS <= 0 || res.LeaseExpiresMaxS > 5 || res.LeaseExpiryBoundS != 6.1 {
		t.Errorf("leases with the lost lab expired %.3f s and were found gone %.3f s after the loss (bound %.3f s), time to live 5 s",
			res.LeaseExpiresMaxS, res.LeaseExpiryMaxS, res.LeaseExpiryBoundS)
	}
	// Its line in the summary of --scenario all.
	sum := driver.NewSummary(1)
	sum.AddJudged(res.Summary())
	var out bytes.Buffer
	if err := suite.Print(sum, true, &out); err != nil {
		t.Fatalf("the summary with the lab-loss run fails: %v\n%s", err, out.String())
	}
	var got struct {
		LostJobs  int `json:"lost_jobs"`
		Scenarios []struct {
			Name            string  `json:"name"`
			LostLab         string  `json:"lost_lab"`
			LeaseExpiryMaxS float64 `json:"lease_expiry_max_s"`
			JobsSubmitted   int     `json:"jobs_submitted"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Scenarios) != 1 || got.Scenarios[0].Name != "lab-loss" ||
		got.Scenarios[0].LostLab != "lab-b" || got.Scenarios[0].LeaseExpiryMaxS != res.LeaseExpiryMaxS ||
		got.Scenarios[0].JobsSubmitted != res.JobsSubmitted+res.LostLabJobs || got.LostJobs != 0 {
		t.Errorf("summary JSON (%v): %s", err, out.String())
	}
}
