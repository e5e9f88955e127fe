package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/internal/usage"
	"pollux/testbed/chaos/attack"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/labloss"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/launch"
)

func TestPrint(t *testing.T) {
	passed := driver.NewSummary(3)
	passed.AddJudged(driver.ScenarioSummary{Name: "lab-loss", Faults: 1, FaultsPlanned: 1, FaultsByKind: map[string]int{"lab-kill": 1}, JobsSubmitted: 4,
		JobsCompleted: 4, Failures: []string{}, LostLab: "lab-b"})
	failed := driver.NewSummary(3)
	failed.Fail("mixed", errors.New("no leader"))
	unkilled := driver.NewSummary(3)
	unkilled.AddJudged(driver.ScenarioSummary{Name: "lab-loss", FaultsPlanned: 1, FaultsByKind: map[string]int{}, JobsSubmitted: 4,
		JobsCompleted: 4, Failures: []string{}, LostLab: "lab-b"})
	for _, tc := range []struct {
		name    string
		sum     *driver.Summary
		json    bool
		fails   bool
		content []string
	}{
		{"a passing run as a table", passed, false, false, []string{"lab-loss", "total", "faults: 1 of 1 planned injected, 0 skipped (0 network, 0 partitions): lab-kill 1"}},
		{"a lab loss that killed nothing", unkilled, true, true, []string{`"faults_planned": 1`, `"faults_injected": 0`, `"faults_skipped": 1`,
			"lab-loss: 1 of 1 planned faults not injected"}},
		{"a passing run as JSON", passed, true, false, []string{`"lost_lab": "lab-b"`, `"jobs_completed": 4`}},
		{"a failed run as a table", failed, false, true, []string{"FAIL: mixed: no leader"}},
		{"a failed run as JSON", failed, true, true, []string{`"failures": [`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Print(tc.sum, tc.json, &out)
			if (err != nil) != tc.fails || err != nil && !errors.Is(err, ErrFailed) {
				t.Errorf("err = %v, want failed %v", err, tc.fails)
			}
			if tc.json && !json.Valid(out.Bytes()) {
				t.Errorf("not one JSON object: %s", out.String())
			}
			for _, c := range tc.content {
				if !strings.Contains(out.String(), c) {
					t.Errorf("output lacks %q:\n%s", c, out.String())
				}
			}
		})
	}
}

// TestRunSkippedNetworkFaults runs a scenario of network faults only on
// the loopback network (so no cluster starts): the faults are listed as
// skipped with why, and fail the run unless it opted out.
func TestRunSkippedNetworkFaults(t *testing.T) {
	sc := schedule.Scenario{Name: "net", Counts: []schedule.Count{{Kind: schedule.Loss, N: 2}, {Kind: schedule.Split21, N: 1}}}
	o := driver.Options{Exec: []string{"/bin/false"}, Network: launch.Loopback}
	for _, optOut := range []bool{false, true} {
		var out bytes.Buffer
		err := Run(context.Background(), []schedule.Scenario{sc}, nil, 1, o, optOut, true, &out)
		var sum driver.Summary
		if jerr := json.Unmarshal(out.Bytes(), &sum); jerr != nil {
			t.Fatalf("opt-out %v: %v: %s", optOut, jerr, out.String())
		}
		if !errors.Is(err, ErrFailed) || sum.FaultsPlanned != 3 || sum.FaultsInjected != 0 || sum.FaultsSkipped != 3 ||
			len(sum.SkippedFaults) != 2 || !strings.Contains(sum.SkippedFaults[0], "net: 2 loss: network faults need network namespaces") {
			t.Errorf("opt-out %v: err %v, summary %s", optOut, err, out.String())
		}
		named := strings.Contains(err.Error(), "3 of 3 faults not injected") && slices.ContainsFunc(sum.Failures, func(f string) bool {
			return strings.Contains(f, "2 loss faults planned but not injected")
		})
		if named == optOut {
			t.Errorf("opt-out %v: the failures name the skipped faults: %v (%v)", optOut, named, sum.Failures)
		}
	}
}

func TestJudgeWithoutHistoryIsBadInput(t *testing.T) {
	err := Judge(t.TempDir(), true, &bytes.Buffer{})
	if !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), "no history.jsonl") {
		t.Errorf("err = %v, want bad input naming history.jsonl", err)
	}
}

func TestPrintLabLoss(t *testing.T) {
	res := &labloss.Result{Scenario: "lab-loss", LostLab: "lab-a", JobsSubmitted: 8, JobsCompleted: 8, Failures: []string{}}
	var out bytes.Buffer
	if err := PrintLabLoss(res, false, &out); err != nil || !strings.Contains(out.String(), "lab-a") {
		t.Errorf("err %v, table:\n%s", err, out.String())
	}
	res.Failures = []string{"job a-ncf-2 of lab-a failed"}
	out.Reset()
	if err := PrintLabLoss(res, true, &out); !errors.Is(err, ErrFailed) || !json.Valid(out.Bytes()) {
		t.Errorf("err %v, want ErrFailed; JSON:\n%s", err, out.String())
	}
}

func TestPrintAttack(t *testing.T) {
	res := &attack.Result{Attacks: 2, Refused: 1, Succeeded: 1, Elapsed: 3 * time.Second,
		Cases: map[string]attack.Case{"b-attack": {Refused: true, How: "403"}, "a-attack": {How: "accepted"}}}
	var out bytes.Buffer
	if err := printAttack(res, false, &out); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	if a, b := strings.Index(table, "a-attack"), strings.Index(table, "b-attack"); a < 0 || b < a || !strings.Contains(table, "2 attacks, 1 refused, 1 succeeded") {
		t.Errorf("table:\n%s", table)
	}
}
