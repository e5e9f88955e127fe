package driver

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/testbed/builtin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/schedule"
)

func TestPlanSpreadsJobsBeforeTheLastFault(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	sc := schedule.Scenario{Name: "agent-kill", Counts: []schedule.Count{{Kind: schedule.AgentKill, N: 5}}}
	faults, err := schedule.Generate(3, sc, schedule.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	plan := func(seed uint64) []submission {
		o := Options{Exec: []string{"pollux"}}
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		r := &run{o: o, log: slog.New(slog.DiscardHandler), faults: faults, cat: cat, rng: rand.New(rand.NewPCG(seed, 1)),
			cancelRng: rand.New(rand.NewPCG(seed, 2)), scenario: sc.Name}
		r.plan()
		return r.subs
	}
	subs := plan(9)
	if len(subs) != len(faults)+2 {
		t.Fatalf("%d jobs for %d faults, want faults+2", len(subs), len(faults))
	}
	last := faults[len(faults)-1].At
	names := map[string]bool{}
	for i, s := range subs {
		if s.at < 0 || s.at >= max(last, 1) || (i > 0 && s.at < subs[i-1].at) {
			t.Errorf("job %d at %v: want sorted times in [0, %v)", i, s.at, last)
		}
		if names[s.name] || len(s.spec) == 0 || !strings.HasPrefix(s.name, "ak-") {
			t.Errorf("job %d: name %q repeated, unprefixed or empty spec", i, s.name)
		}
		names[s.name] = true
	}
	if subs[0].at != 0 || subs[1].at != 0 {
		t.Errorf("the first two jobs should be submitted at once: %v, %v", subs[0].at, subs[1].at)
	}
	// A quarter of the jobs are cancelled (never one of the first two),
	// within CancelWithin of their acknowledgement.
	cancels := 0
	for _, s := range subs {
		if s.cancel == 0 {
			continue
		}
		cancels++
		if s.at == 0 || s.cancel > 3*time.Second+1 {
			t.Errorf("job %s cancelled %v after its acknowledgement, submitted at %v", s.name, s.cancel, s.at)
		}
	}
	if cancels != len(subs)/4 || cancels == 0 {
		t.Errorf("%d of %d jobs cancelled, want a quarter", cancels, len(subs))
	}
	again := plan(9)
	if !slices.EqualFunc(subs, again, func(a, b submission) bool { return a.at == b.at && a.name == b.name && a.cancel == b.cancel }) {
		t.Error("the same seed gave another workload")
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		ok   bool
	}{
		{"defaults", Options{Exec: []string{"pollux"}}, true},
		{"no exec", Options{}, false},
		{"two servers", Options{Exec: []string{"pollux"}, Servers: 2}, false},
		{"one agent", Options{Exec: []string{"pollux"}, Agents: 1}, false},
		{"negative time scale", Options{Exec: []string{"pollux"}, TimeScale: -1}, false},
		{"no cancels", Options{Exec: []string{"pollux"}, Cancels: -1}, true},
		{"negative cancels", Options{Exec: []string{"pollux"}, Cancels: -2}, false},
	} {
		err := tc.o.defaults()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestAbbrev(t *testing.T) {
	for in, want := range map[string]string{"leader-kill": "lk", "mixed": "m", "agent-restart": "ar", "split-2-1": "s21"} {
		if got := abbrev(in); got != want {
			t.Errorf("abbrev(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSummary(t *testing.T) {
	s := NewSummary(4)
	if s.Pass() {
		t.Error("an empty summary passes")
	}
	pass := &Result{Scenario: "a", Check: &check.Result{
		Outcomes: check.Outcomes{Submitted: 5, Completed: 5},
		Metrics: check.Metrics{Planned: 3, Faults: 3, ByKind: map[string]int{"leader-kill": 2, "loss": 1}, Network: 1,
			Failovers: []time.Duration{time.Second, 3 * time.Second}, Replacements: []time.Duration{2 * time.Second}}}}
	s.Add(pass)
	if !s.Pass() || s.Faults != 3 || s.NetworkFaults != 1 || s.FailoverMedianS != 2 || s.FailoverMaxS != 3 || s.ReplacementMaxS != 2 || !s.Linearizable {
		t.Errorf("after a passing run: %+v", s)
	}
	fail := &Result{Scenario: "b", Harness: []string{"server s1 would not stop"}, Check: &check.Result{
		Outcomes: check.Outcomes{Submitted: 2, Completed: 1, Lost: 1, Jobs: []check.JobOutcome{{Job: "x", Outcome: check.Lost}}},
		Metrics:  check.Metrics{Planned: 1, ByKind: map[string]int{}, NotInjected: []string{"#0 split-2-1 (never begun)"}}}}
	s.Add(fail)
	if s.Pass() || s.LostJobs != 1 || s.JobsSubmitted != 7 || s.FaultsPlanned != 4 || len(s.Failures) != 3 {
		t.Errorf("after a failing run: %+v", s)
	}
	s.Fail("c", errors.New("no leader"))
	if s.Linearizable || len(s.Scenarios) != 3 {
		t.Errorf("after an unjudged run: %+v", s)
	}
}

// A run judged elsewhere adds its figures and failures, and leaves the
// summary's linearizability as the other runs made it.
func TestSummaryAddJudged(t *testing.T) {
	s := NewSummary(1)
	s.Add(&Result{Scenario: "a", Check: &check.Result{Outcomes: check.Outcomes{Submitted: 2, Completed: 2},
		Metrics: check.Metrics{Planned: 1, Faults: 1, ByKind: map[string]int{"leader-kill": 1}}}})
	s.AddJudged(ScenarioSummary{Name: "lab-loss", Faults: 1, FaultsPlanned: 1, FaultsByKind: map[string]int{"lab-kill": 1}, JobsSubmitted: 4,
		JobsCompleted: 4, LostLab: "lab-b", LeaseExpiryMaxS: 10.1, Linearizable: true})
	if !s.Pass() || !s.Linearizable || s.Faults != 2 || s.FaultsInjected != 2 || s.FaultsPlanned != 2 || s.FaultsSkipped != 0 ||
		s.JobsSubmitted != 6 || s.FaultsByKind["lab-kill"] != 1 || len(s.Notes) != 0 || !s.Scenarios[1].Linearizable || s.Scenarios[1].LostLab != "lab-b" {
		t.Errorf("after a passing lab-loss run: %+v", s)
	}
	s.AddJudged(ScenarioSummary{Name: "lab-loss", JobsSubmitted: 4, JobsCompleted: 3, LostJobs: 1, Violations: 1,
		Failures: []string{"job a-1 of lab-a failed"}})
	if s.Pass() || s.Linearizable || s.LostJobs != 1 || s.Violations != 1 || len(s.Failures) != 1 || s.Failures[0] != "lab-loss: job a-1 of lab-a failed" {
		t.Errorf("after a failing lab-loss run: %+v", s)
	}
}
