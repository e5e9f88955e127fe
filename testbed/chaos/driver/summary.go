package driver

import (
	"fmt"
	"time"

	"pollux/testbed/chaos/check"
)

// Summary folds runs into the figures `pollux chaos --json` prints. The
// field names are stable: other tools read them.
type Summary struct {
	Seed uint64 `json:"seed"`
	// FaultsPlanned were scheduled: FaultsInjected of them were injected
	// (Faults, the older name, is the same count), FaultsSkipped not,
	// each with why in SkippedFaults (a fault the run did not try,
	// lacking network namespaces, or one it tried and failed).
	// FaultsByKind counts the injected ones by kind; NetworkFaults and
	// Partitions the network faults among them and the partitions among
	// those.
	Faults         int            `json:"faults"`
	FaultsInjected int            `json:"faults_injected"`
	FaultsByKind   map[string]int `json:"faults_by_kind"`
	Partitions     int            `json:"partitions"`
	NetworkFaults  int            `json:"network_faults"`
	FaultsPlanned  int            `json:"faults_planned"`
	FaultsSkipped  int            `json:"faults_skipped"`
	SkippedFaults  []string       `json:"faults_skipped_why"`
	// Every job the harness tried to submit, and what became of it.
	JobsSubmitted   int `json:"jobs_submitted"`
	JobsCompleted   int `json:"jobs_completed"`
	JobsFailed      int `json:"jobs_failed"`
	JobsCancelled   int `json:"jobs_cancelled"`
	JobsUnsubmitted int `json:"jobs_unsubmitted"`
	LostJobs        int `json:"lost_jobs"`
	// Violations counts the invariant violations; Linearizable says
	// every run's API history was shown linearizable.
	Violations   int  `json:"violations"`
	Linearizable bool `json:"linearizable"`
	// Failover and re-placement times (seconds) over every run.
	Failovers          int     `json:"failovers"`
	FailoverMedianS    float64 `json:"failover_median_s"`
	FailoverMaxS       float64 `json:"failover_max_s"`
	Replacements       int     `json:"replacements"`
	ReplacementMedianS float64 `json:"replacement_median_s"`
	ReplacementMaxS    float64 `json:"replacement_max_s"`
	// Failures lists every reason the runs fail (empty: they pass);
	// Skipped the scenarios not run, with the reason.
	Failures []string `json:"failures"`
	Skipped  []string `json:"skipped,omitempty"`
	// Notes are worth knowing but fail nothing (a server that needed
	// SIGKILL at the end of a run).
	Notes    []string `json:"notes,omitempty"`
	ElapsedS float64  `json:"elapsed_s"`
	// Scenarios holds each run's figures.
	Scenarios []ScenarioSummary `json:"scenarios"`

	failovers, replacements []time.Duration
}

// ScenarioSummary is one run's figures.
type ScenarioSummary struct {
	Name            string         `json:"name"`
	Faults          int            `json:"faults"`
	FaultsByKind    map[string]int `json:"faults_by_kind"`
	JobsSubmitted   int            `json:"jobs_submitted"`
	JobsCompleted   int            `json:"jobs_completed"`
	JobsFailed      int            `json:"jobs_failed"`
	JobsCancelled   int            `json:"jobs_cancelled"`
	JobsUnsubmitted int            `json:"jobs_unsubmitted"`
	LostJobs        int            `json:"lost_jobs"`
	Violations      int            `json:"violations"`
	Linearizable    bool           `json:"linearizable"`
	FailoverMedianS float64        `json:"failover_median_s"`
	FailoverMaxS    float64        `json:"failover_max_s"`
	ReplacementMaxS float64        `json:"replacement_max_s"`
	Failures        []string       `json:"failures"`
	ElapsedS        float64        `json:"elapsed_s"`
	// FaultsPlanned were scheduled (Faults of them injected).
	FaultsPlanned int `json:"faults_planned"`
	// Dir is the run's directory, if kept.
	Dir string `json:"dir,omitempty"`
	// LostLab and LeaseExpiryMaxS are the lab-loss scenario's: the lab
	// killed, and the longest a peer's ledger held a lease with it after
	// the loss.
	LostLab         string  `json:"lost_lab,omitempty"`
	LeaseExpiryMaxS float64 `json:"lease_expiry_max_s,omitempty"`
}

// NewSummary starts an empty summary for seed.
func NewSummary(seed uint64) *Summary {
	return &Summary{Seed: seed, FaultsByKind: map[string]int{}, Linearizable: true, Failures: []string{}, SkippedFaults: []string{},
		Scenarios: []ScenarioSummary{}}
}

// Add folds one run in.
func (s *Summary) Add(r *Result) {
	sc := ScenarioSummary{Name: r.Scenario, FaultsByKind: map[string]int{}, Failures: r.Failures(), ElapsedS: r.Elapsed.Seconds(), Dir: r.Dir}
	if sc.Failures == nil {
		sc.Failures = []string{}
	}
	if c := r.Check; c != nil {
		m, o := c.Metrics, c.Outcomes
		sc.Faults = m.Faults
		for k, n := range m.ByKind {
			sc.FaultsByKind[k] += n
			s.FaultsByKind[k] += n
		}
		sc.FaultsPlanned = m.Planned
		s.addFaults(r.Scenario, m.Faults, m.Planned, m.NotInjected)
		s.NetworkFaults += m.Network
		s.Partitions += m.Partitions
		sc.JobsSubmitted, sc.JobsCompleted, sc.JobsFailed, sc.JobsCancelled = o.Submitted, o.Completed, o.Failed, o.Cancelled
		sc.JobsUnsubmitted, sc.LostJobs = o.Unsubmitted, o.Lost
		sc.Violations, sc.Linearizable = len(c.Violations), c.Linear.Linearizable()
		sc.FailoverMedianS, sc.FailoverMaxS = check.Median(m.Failovers).Seconds(), check.Max(m.Failovers).Seconds()
		sc.ReplacementMaxS = check.Max(m.Replacements).Seconds()
		s.failovers = append(s.failovers, m.Failovers...)
		s.replacements = append(s.replacements, m.Replacements...)
	} else {
		sc.Linearizable = false
		sc.FaultsPlanned = len(r.Faults)
		var why []string
		for _, f := range r.Faults {
			why = append(why, f.String()+" (the run was not judged)")
		}
		s.addFaults(r.Scenario, 0, len(r.Faults), why)
	}
	s.tally(sc)
	s.Linearizable = s.Linearizable && sc.Linearizable
	for _, f := range sc.Failures {
		s.Failures = append(s.Failures, r.Scenario+": "+f)
	}
	s.Failovers, s.Replacements = len(s.failovers), len(s.replacements)
	s.FailoverMedianS, s.FailoverMaxS = check.Median(s.failovers).Seconds(), check.Max(s.failovers).Seconds()
	s.ReplacementMedianS, s.ReplacementMaxS = check.Median(s.replacements).Seconds(), check.Max(s.replacements).Seconds()
	s.ElapsedS += sc.ElapsedS
	for _, n := range r.Notes {
		s.Notes = append(s.Notes, r.Scenario+": "+n)
	}
	s.Scenarios = append(s.Scenarios, sc)
}

// addFaults counts a run's planned faults, injected of them injected,
// the rest not, each with why.
func (s *Summary) addFaults(scenario string, injected, planned int, why []string) {
	s.Faults += injected
	s.FaultsInjected += injected
	s.FaultsPlanned += planned
	s.FaultsSkipped += planned - injected
	for _, w := range why {
		s.SkippedFaults = append(s.SkippedFaults, scenario+": "+w)
	}
}

// tally adds sc's jobs and violations to the summary's.
func (s *Summary) tally(sc ScenarioSummary) {
	s.JobsSubmitted += sc.JobsSubmitted
	s.JobsCompleted += sc.JobsCompleted
	s.JobsFailed += sc.JobsFailed
	s.JobsCancelled += sc.JobsCancelled
	s.JobsUnsubmitted += sc.JobsUnsubmitted
	s.LostJobs += sc.LostJobs
	s.Violations += sc.Violations
}

// AddJudged folds in a run judged outside this package (the lab-loss
// scenario of three labs, each lab's API history checked on its own):
// its figures as given.
func (s *Summary) AddJudged(sc ScenarioSummary) {
	if sc.Failures == nil {
		sc.Failures = []string{}
	}
	s.Linearizable = s.Linearizable && sc.Linearizable
	var why []string
	if sc.Faults < sc.FaultsPlanned {
		why = append(why, fmt.Sprintf("%d of %d planned faults not injected", sc.FaultsPlanned-sc.Faults, sc.FaultsPlanned))
		sc.Failures = append(sc.Failures, why[0])
	}
	s.addFaults(sc.Name, sc.Faults, sc.FaultsPlanned, why)
	for k, n := range sc.FaultsByKind {
		s.FaultsByKind[k] += n
	}
	s.tally(sc)
	for _, f := range sc.Failures {
		s.Failures = append(s.Failures, sc.Name+": "+f)
	}
	s.ElapsedS += sc.ElapsedS
	s.Scenarios = append(s.Scenarios, sc)
}

// Fail records a run that could not be judged at all.
func (s *Summary) Fail(scenario string, err error) {
	s.Linearizable = false
	s.Failures = append(s.Failures, scenario+": "+err.Error())
	s.Scenarios = append(s.Scenarios, ScenarioSummary{Name: scenario, FaultsByKind: map[string]int{}, Failures: []string{err.Error()}})
}

// Skip records a scenario that was not run, and why.
func (s *Summary) Skip(scenario, why string) { s.Skipped = append(s.Skipped, scenario+": "+why) }

// SkipFaults records n planned faults of a kind that a scenario did not
// try to inject, and why; fail makes that a failure of the run.
func (s *Summary) SkipFaults(scenario, kind string, n int, why string, fail bool) {
	s.addFaults(scenario, 0, n, []string{fmt.Sprintf("%d %s: %s", n, kind, why)})
	if fail {
		s.Failures = append(s.Failures, fmt.Sprintf("%s: %d %s faults planned but not injected: %s (--network loopback opts out)", scenario, n, kind, why))
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: %d %s faults skipped: the run opted out of network faults (--network loopback)", scenario, n, kind))
	}
}

// Pass reports whether every run passed.
func (s *Summary) Pass() bool { return len(s.Failures) == 0 && len(s.Scenarios) > 0 }
