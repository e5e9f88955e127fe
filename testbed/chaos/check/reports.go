package check

import (
	"fmt"

	"pollux/testbed/chaos/history"
)

// checkReports walks the accepted reports in time order. A report is
// wrong when the worker's incarnation differs from the one it was
// accepted into, when no worker of that job and incarnation had been
// started, or when a newer incarnation of the job had already started
// workers (the owner that accepted it was stale).
func checkReports(ev []history.Event) []Violation {
	type inc struct {
		job string
		inc uint64
	}
	started := map[inc]history.Event{}
	newest := map[string]history.Event{}
	var out []Violation
	for _, e := range ev {
		switch e.Kind {
		case history.WorkerStart:
			k := inc{e.Job, e.Inc}
			if _, ok := started[k]; !ok {
				started[k] = e
			}
			if n, ok := newest[e.Job]; !ok || e.Inc > n.Inc {
				newest[e.Job] = e
			}
		case history.Report:
			switch start, ok := started[inc{e.Job, e.Inc}]; {
			case e.Inc != e.Into:
				older := "an older"
				if e.Inc > e.Into {
					older = "a newer"
				}
				out = append(out, Violation{Incarnation, e.T,
					fmt.Sprintf("%s accepted a report of job %q from %s incarnation %d into incarnation %d", e.Src, e.Job, older, e.Inc, e.Into),
					[]history.Event{e}})
			case !ok:
				out = append(out, Violation{Incarnation, e.T,
					fmt.Sprintf("%s accepted a report of job %q incarnation %d, which never started a worker", e.Src, e.Job, e.Inc),
					[]history.Event{e}})
			default:
				if n := newest[e.Job]; n.Inc > e.Into {
					out = append(out, Violation{Incarnation, e.T,
						fmt.Sprintf("%s accepted a report of job %q into incarnation %d after incarnation %d started at %s",
							e.Src, e.Job, e.Into, n.Inc, fmtT(n.T)),
						[]history.Event{start, n, e}})
				}
			}
		}
	}
	return out
}
