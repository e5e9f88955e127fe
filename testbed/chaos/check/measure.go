package check

import (
	"slices"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/schedule"
)

// Metrics are a run's figures, derived from its history.
type Metrics struct {
	// Faults counts the injected faults: distinct (Fault, FSeq) pairs
	// among the events; ByKind splits them by fault kind.
	Faults int
	ByKind map[string]int
	// JobsSubmitted counts acknowledged jobs, JobsCompleted the
	// acknowledged jobs that completed at least once, Lost the rest.
	JobsSubmitted, JobsCompleted, Lost int
	// Failovers holds, for every leader-kill and leader-pause fault, the
	// time from its first event (the signal) until the first allocation
	// committed in a later term than every commit before the fault.
	// FailoversMissing counts such faults after which none was.
	Failovers        []time.Duration
	FailoversMissing int
	// Replacements holds, for every agent-kill fault whose agent ran
	// workers at the time of the kill, the time from the kill until every
	// one of those jobs had started a worker of a newer incarnation
	// (jobs that completed first do not count).
	// ReplacementsMissing counts such faults after which some job never
	// was re-placed.
	Replacements        []time.Duration
	ReplacementsMissing int
}

// Measure computes a run's figures from its history (in any order).
func Measure(events []history.Event) Metrics {
	ev := slices.Clone(events)
	history.Sort(ev)
	m := Metrics{ByKind: map[string]int{}}

	done := completions(ev)
	for _, s := range submissions(ev) {
		m.JobsSubmitted++
		if len(done[s.Job]) > 0 {
			m.JobsCompleted++
		} else {
			m.Lost++
		}
	}

	type faultID struct {
		kind string
		seq  int
	}
	seen := map[faultID]bool{}
	intervals, _ := workers(ev)
	for _, e := range ev {
		id := faultID{e.Fault, e.FSeq}
		if e.Fault == "" || seen[id] {
			continue
		}
		seen[id] = true
		m.Faults++
		m.ByKind[e.Fault]++
		switch schedule.Kind(e.Fault) {
		case schedule.LeaderKill, schedule.LeaderPause:
			if d, ok := failover(ev, e.T); ok {
				m.Failovers = append(m.Failovers, d)
			} else {
				m.FailoversMissing++
			}
		case schedule.AgentKill:
			if e.Role != history.Agent {
				continue
			}
			d, replaced, ok := replacement(ev, intervals, done, e)
			switch {
			case !ok:
				m.ReplacementsMissing++
			case replaced > 0:
				m.Replacements = append(m.Replacements, d)
			}
		}
	}
	return m
}

// failover returns the time from t0 until the first commit in a term
// above every term committed up to t0.
func failover(ev []history.Event, t0 time.Duration) (time.Duration, bool) {
	var term uint64
	for _, e := range ev {
		if e.Kind != history.Commit {
			continue
		}
		if e.T <= t0 {
			term = max(term, e.Term)
		} else if e.Term > term {
			return e.T - t0, true
		}
	}
	return 0, false
}

// replacement returns how long after the kill event k every job that had
// a worker on k's node was running a newer incarnation, and how many jobs
// were re-placed; false if one was neither re-placed nor completed.
func replacement(ev []history.Event, intervals []*interval, done map[string][]completion, k history.Event) (time.Duration, int, bool) {
	victims := map[string]uint64{} // job -> newest incarnation on the node
	for _, w := range intervals {
		if w.start.Node == k.ID && w.start.T <= k.T && w.end > k.T {
			victims[w.start.Job] = max(victims[w.start.Job], w.start.Inc)
		}
	}
	var worst time.Duration
	replaced := 0
	for job, inc := range victims {
		settled := len(done[job]) > 0 && done[job][0].first.T <= k.T
		for _, e := range ev {
			if e.T <= k.T || e.Job != job {
				continue
			}
			if e.Kind == history.WorkerStart && e.Inc > inc {
				worst = max(worst, e.T-k.T)
				replaced++
				settled = true
				break
			}
			if e.Kind == history.Complete {
				settled = true
				break
			}
		}
		if !settled {
			return 0, replaced, false
		}
	}
	return worst, replaced, true
}
