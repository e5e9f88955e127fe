package check

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"pollux/testbed/chaos/history"
)

// open marks a worker interval that no recorder has closed.
const open = time.Duration(1<<63 - 1)

// interval is one worker's lifetime: from its WorkerStart until the first
// WorkerStop any recorder wrote for it (its agent after reaping it, a new
// incarnation of its agent, or the harness after seeing its pid gone).
// The death of its agent does not end it: an orphaned worker holds its
// GPUs until somebody saw it gone.
type interval struct {
	start, stop history.Event
	end         time.Duration // stop.T, or open
}

type workerKey struct {
	node string
	pid  int
}

// workers rebuilds every worker's interval, in order of start, and the
// consistency violations met on the way.
func workers(ev []history.Event) ([]*interval, []Violation) {
	var all []*interval
	var out []Violation
	running := map[workerKey]*interval{}
	ended := map[workerKey]*interval{}
	for _, e := range ev {
		k := workerKey{e.Node, e.PID}
		switch e.Kind {
		case history.WorkerStart:
			if w := running[k]; w != nil {
				out = append(out, Violation{Consistent, e.T,
					fmt.Sprintf("worker pid %d on node %q started again (job %q incarnation %d) while still running job %q incarnation %d since %s",
						e.PID, e.Node, e.Job, e.Inc, w.start.Job, w.start.Inc, fmtT(w.start.T)),
					[]history.Event{w.start, e}})
				continue
			}
			w := &interval{start: e, end: open}
			running[k] = w
			all = append(all, w)
		case history.WorkerStop:
			w := running[k]
			if w == nil {
				if prev := ended[k]; prev == nil || prev.start.Job != e.Job || prev.start.Inc != e.Inc {
					// A second observation of a stopped worker is fine;
					// a stop nobody started is not.
					out = append(out, Violation{Consistent, e.T,
						fmt.Sprintf("worker pid %d on node %q (job %q incarnation %d) stopped but never started", e.PID, e.Node, e.Job, e.Inc),
						[]history.Event{e}})
				}
				continue
			}
			if w.start.Job != e.Job || w.start.Inc != e.Inc {
				out = append(out, Violation{Consistent, e.T,
					fmt.Sprintf("worker pid %d on node %q started for job %q incarnation %d, stopped as job %q incarnation %d",
						e.PID, e.Node, w.start.Job, w.start.Inc, e.Job, e.Inc),
					[]history.Event{w.start, e}})
			}
			w.stop, w.end = e, e.T
			delete(running, k)
			ended[k] = w
		}
	}
	return all, out
}

type gpuKey struct {
	node string
	gpu  int
}

func checkGPUs(ev []history.Event, end time.Duration) []Violation {
	all, out := workers(ev)
	byGPU := map[gpuKey][]*interval{}
	for _, w := range all {
		if w.end == open {
			out = append(out, Violation{GPUExclusive, end,
				fmt.Sprintf("worker pid %d on node %q (job %q incarnation %d, GPUs %v), started at %s, still running when the history ends",
					w.start.PID, w.start.Node, w.start.Job, w.start.Inc, w.start.GPUs, fmtT(w.start.T)),
				[]history.Event{w.start}})
		}
		for _, g := range w.start.GPUs {
			k := gpuKey{w.start.Node, g}
			byGPU[k] = append(byGPU[k], w)
		}
	}
	keys := make([]gpuKey, 0, len(byGPU))
	for k := range byGPU {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b gpuKey) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.gpu, b.gpu)) })
	for _, k := range keys {
		// Intervals are in start order; each overlaps every earlier one
		// that has not ended by its start (half-open: [start, end)).
		var active []*interval
		for _, w := range byGPU[k] {
			active = slices.DeleteFunc(active, func(a *interval) bool { return a.end <= w.start.T })
			for _, a := range active {
				out = append(out, overlap(k, a, w))
			}
			active = append(active, w)
		}
	}
	return out
}

func overlap(k gpuKey, a, b *interval) Violation {
	what := "two jobs"
	switch {
	case a.start.Job == b.start.Job && a.start.Inc == b.start.Inc:
		what = "two workers of one incarnation"
	case a.start.Job == b.start.Job:
		what = "two incarnations of one job"
	}
	until := "still running"
	if a.end != open {
		until = "until " + fmtT(a.end)
	}
	evidence := []history.Event{a.start, b.start}
	if a.end != open {
		evidence = append(evidence, a.stop)
	}
	return Violation{GPUExclusive, b.start.T,
		fmt.Sprintf("GPU %d of node %q ran %s at once: job %q incarnation %d (pid %d, from %s, %s) and job %q incarnation %d (pid %d, from %s)",
			k.gpu, k.node, what, a.start.Job, a.start.Inc, a.start.PID, fmtT(a.start.T), until,
			b.start.Job, b.start.Inc, b.start.PID, fmtT(b.start.T)),
		evidence}
}

// Running returns the WorkerStart events of the workers running at time
// at (started at or before it, not seen gone by then), in start order.
// The harness calls it after killing an agent to learn which pids to
// watch until they are gone (and then record their WorkerStop).
func Running(events []history.Event, at time.Duration) []history.Event {
	ev := slices.Clone(events)
	history.Sort(ev)
	all, _ := workers(ev)
	var out []history.Event
	for _, w := range all {
		if w.start.T <= at && w.end > at {
			out = append(out, w.start)
		}
	}
	return out
}
