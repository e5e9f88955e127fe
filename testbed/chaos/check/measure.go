package check

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/record"
	"pollux/testbed/chaos/schedule"
)

// Metrics are a run's figures.
type Metrics struct {
	// Planned counts the faults the run announced; Faults those injected
	// (a fault_begin and a fault_end), ByKind by kind; Network and
	// Partitions count the injected network faults and, among them, the
	// partitions.
	Planned, Faults     int
	ByKind              map[string]int
	Network, Partitions int
	// NotInjected names the planned faults without a begin or an end.
	NotInjected []string
	// Failovers holds, for every fault that deposed the leader while a
	// quorum stayed, the time from its begin until the first write (a
	// submission) invoked after it was acknowledged; FailoversMissing
	// names those before whose next fault (or the end) none was.
	Failovers        []time.Duration
	FailoversMissing []string
	// Replacements holds, for every agent kill (or rack loss) that ended
	// workers, the time from the kill until every one of their jobs had
	// started a worker of a newer incarnation (jobs that finished first
	// aside); ReplacementsMissing names the jobs never re-placed.
	Replacements        []time.Duration
	ReplacementsMissing []string
}

// measure derives the figures.
func measure(r *run, ls []*life) Metrics {
	m := Metrics{ByKind: map[string]int{}}
	begun := map[int]event{}
	ended := map[int]bool{}
	var begins []event
	for _, e := range r.events {
		switch e.Kind {
		case history.FaultBegin:
			begun[e.Seq] = e
			begins = append(begins, e)
		case history.FaultEnd:
			ended[e.Seq] = true
		}
	}
	for _, p := range r.begin.Planned {
		m.Planned++
		b, ok := begun[p.Seq]
		switch {
		case !ok:
			m.NotInjected = append(m.NotInjected, fmt.Sprintf("#%d %s (never begun)", p.Seq, p.Fault))
			continue
		case b.Fault != p.Fault:
			m.NotInjected = append(m.NotInjected, fmt.Sprintf("#%d %s (%s injected instead)", p.Seq, p.Fault, b.Fault))
			continue
		case !ended[p.Seq]:
			m.NotInjected = append(m.NotInjected, fmt.Sprintf("#%d %s (begun at %s, never ended)", p.Seq, p.Fault, r.at(b.t)))
			continue
		}
		m.Faults++
		m.ByKind[p.Fault]++
		k := schedule.Kind(p.Fault)
		if k.Network() {
			m.Network++
		}
		if k.Partition() {
			m.Partitions++
		}
	}
	for i, b := range begins {
		next := r.end
		if i+1 < len(begins) {
			next = begins[i+1].t
		}
		name := fmt.Sprintf("#%d %s at %s", b.Seq, b.Fault, r.at(b.t))
		if b.Deposes {
			if d, ok := failover(r, b.t, next); ok {
				m.Failovers = append(m.Failovers, d)
			} else {
				m.FailoversMissing = append(m.FailoversMissing, name+" (no write acknowledged before "+r.at(next)+")")
			}
		}
		if k := schedule.Kind(b.Fault); k == schedule.AgentKill && len(b.Targets) == 1 || k == schedule.RackLoss {
			d, missing := replacement(r, ls, b)
			if d >= 0 {
				m.Replacements = append(m.Replacements, d)
			}
			for _, j := range missing {
				m.ReplacementsMissing = append(m.ReplacementsMissing, name+": job "+j)
			}
		}
	}
	return m
}

// failover is the time from t0 until the first submission invoked at or
// after t0 was acknowledged, if that happened before limit.
func failover(r *run, t0, limit int64) (time.Duration, bool) {
	best := int64(-1)
	for _, p := range r.ops {
		if p.inv.F == history.Submit && p.call >= t0 && p.ok() && p.ret <= limit && (best < 0 || p.ret < best) {
			best = p.ret
		}
	}
	return time.Duration(best - t0), best >= 0
}

// replacement measures agent kill (or rack loss) b: the jobs with a
// worker alive on a killed node at the kill must each start a worker of
// a newer incarnation, or finish (a done record), or have been cancelled
// (an acknowledged cancel: a job cancelled before it could be re-placed,
// or just before the kill while it still had its workers, is not). It
// returns the time until the last was re-placed (-1 if no job needed it)
// and the jobs never re-placed.
func replacement(r *run, ls []*life, b event) (time.Duration, []string) {
	cancelled := map[string]bool{}
	for _, p := range r.ops {
		if p.inv.F == history.Cancel && p.ok() {
			cancelled[p.inv.Job] = true
		}
	}
	victims := map[string]uint64{} // job -> newest incarnation on the nodes
	for _, l := range ls {
		if slices.Contains(b.Targets, l.w.Node) && l.start.T <= b.t && !l.endsBy(b.t) {
			victims[l.start.Job] = max(victims[l.start.Job], l.start.Inc)
		}
	}
	worst := time.Duration(-1)
	var missing []string
	for _, job := range slices.Sorted(maps.Keys(victims)) {
		inc := victims[job]
		var first int64 = -1
		finished := false
		for _, l := range ls {
			if l.start.Job != job {
				continue
			}
			if l.start.Inc > inc && l.start.T > b.t && (first < 0 || l.start.T < first) {
				first = l.start.T
			}
			// A job done before the kill needs no re-placement either:
			// its workers on the node may still be exiting then.
			if _, ok := l.w.Find(record.Done); ok {
				finished = true
			}
		}
		switch {
		case first >= 0:
			worst = max(worst, time.Duration(first-b.t))
		case !finished && !cancelled[job]:
			missing = append(missing, job+" (incarnation "+fmt.Sprint(inc)+")")
		}
	}
	return worst, missing
}

// Median returns the median of ds (0 if empty).
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Max returns the largest of ds (0 if empty).
func Max(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}
