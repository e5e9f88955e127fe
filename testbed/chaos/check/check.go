package check

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"pollux/testbed/chaos/history"
)

// Invariant names what a violation breaks.
type Invariant string

// The invariants.
const (
	// ExactlyOnce: every acknowledged submission completes, and no job
	// completes twice (two completions at different Raft indexes).
	ExactlyOnce Invariant = "exactly-once"
	// GPUExclusive: no GPU runs two workers at the same instant, and no
	// worker is still running when the history ends.
	GPUExclusive Invariant = "gpu-exclusive"
	// Incarnation: every accepted report comes from a worker of the
	// incarnation it was accepted into, which is the job's newest.
	Incarnation Invariant = "incarnation"
	// Generation: committed allocation generations increase with the log
	// index and with time on every server, and one generation names one
	// allocation.
	Generation Invariant = "generation"
	// Convergence: every acknowledged job completes within the bound
	// after the last fault (or the last submission, if later).
	Convergence Invariant = "convergence"
	// Consistent: the history itself makes sense (a worker stopped that
	// never started, a worker started twice).
	Consistent Invariant = "consistent-history"
)

// Violation is one breach of an invariant.
type Violation struct {
	Invariant Invariant
	// At is when the breach happened (or, for a missing event, when the
	// history ends).
	At time.Duration
	// Detail says what happened, in words.
	Detail string
	// Evidence holds the events that show it.
	Evidence []history.Event
}

func (v Violation) String() string {
	return fmt.Sprintf("%s at %s: %s", v.Invariant, fmtT(v.At), v.Detail)
}

// Config parameterises Check.
type Config struct {
	// Converge bounds the time from the last fault (or the last
	// acknowledged submission, if later) until every acknowledged job has
	// completed. Zero skips the convergence check.
	Converge time.Duration
}

// Check returns every violation in the history, ordered by time. The
// events may come in any order (they are sorted by time, stably); the
// slice is not modified.
func Check(events []history.Event, cfg Config) []Violation {
	ev := slices.Clone(events)
	history.Sort(ev)
	var end time.Duration
	if len(ev) > 0 {
		end = ev[len(ev)-1].T
	}
	var out []Violation
	out = append(out, checkExactlyOnce(ev, end)...)
	out = append(out, checkGPUs(ev, end)...)
	out = append(out, checkReports(ev)...)
	out = append(out, checkGenerations(ev)...)
	if cfg.Converge > 0 {
		out = append(out, checkConvergence(ev, cfg.Converge)...)
	}
	slices.SortStableFunc(out, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Invariant, b.Invariant))
	})
	return out
}

// completion is a job's completion at one Raft index, first seen at T.
type completion struct {
	index uint64
	first history.Event
}

// completions returns, per job, its distinct completions in order of
// first appearance.
func completions(ev []history.Event) map[string][]completion {
	out := map[string][]completion{}
	for _, e := range ev {
		if e.Kind != history.Complete {
			continue
		}
		if !slices.ContainsFunc(out[e.Job], func(c completion) bool { return c.index == e.Index }) {
			out[e.Job] = append(out[e.Job], completion{index: e.Index, first: e})
		}
	}
	return out
}

// submissions returns the first acknowledgement of every acknowledged
// job, in time order.
func submissions(ev []history.Event) []history.Event {
	var out []history.Event
	seen := map[string]bool{}
	for _, e := range ev {
		if e.Kind == history.Submit && !seen[e.Job] {
			seen[e.Job] = true
			out = append(out, e)
		}
	}
	return out
}

func checkExactlyOnce(ev []history.Event, end time.Duration) []Violation {
	var out []Violation
	done := completions(ev)
	for _, s := range submissions(ev) {
		if len(done[s.Job]) == 0 {
			out = append(out, Violation{ExactlyOnce, end,
				fmt.Sprintf("job %q, acknowledged at %s, never completed", s.Job, fmtT(s.T)),
				[]history.Event{s}})
		}
	}
	jobs := sortedKeys(done)
	for _, job := range jobs {
		cs := done[job]
		if len(cs) < 2 {
			continue
		}
		var idx []string
		var evidence []history.Event
		for _, c := range cs {
			idx = append(idx, fmt.Sprintf("index %d at %s", c.index, fmtT(c.first.T)))
			evidence = append(evidence, c.first)
		}
		out = append(out, Violation{ExactlyOnce, cs[1].first.T,
			fmt.Sprintf("job %q completed %d times (%s)", job, len(cs), strings.Join(idx, ", ")),
			evidence})
	}
	return out
}

func checkConvergence(ev []history.Event, bound time.Duration) []Violation {
	var from time.Duration
	var fromWhat string
	for _, e := range ev {
		if e.Fault != "" && e.T >= from {
			from, fromWhat = e.T, fmt.Sprintf("the last fault (%s #%d)", e.Fault, e.FSeq)
		}
	}
	subs := submissions(ev)
	if len(subs) > 0 && subs[len(subs)-1].T > from {
		from, fromWhat = subs[len(subs)-1].T, fmt.Sprintf("the last submission (job %q)", subs[len(subs)-1].Job)
	}
	if fromWhat == "" {
		fromWhat = "the start"
	}
	deadline := from + bound
	done := completions(ev)
	var late []string
	var evidence []history.Event
	for _, s := range subs {
		cs := done[s.Job]
		switch {
		case len(cs) == 0:
			late = append(late, fmt.Sprintf("%s (never)", s.Job))
			evidence = append(evidence, s)
		case cs[0].first.T > deadline:
			late = append(late, fmt.Sprintf("%s (at %s)", s.Job, fmtT(cs[0].first.T)))
			evidence = append(evidence, cs[0].first)
		}
	}
	if len(late) == 0 {
		return nil
	}
	return []Violation{{Convergence, deadline,
		fmt.Sprintf("%d job(s) not completed within %s of %s at %s: %s", len(late), bound, fromWhat, fmtT(from), strings.Join(late, ", ")),
		evidence}}
}

// fmtT formats a history time as seconds since the epoch.
func fmtT(t time.Duration) string { return fmt.Sprintf("%.3fs", t.Seconds()) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
