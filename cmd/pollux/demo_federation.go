package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"pollux/cluster/federation"
	"pollux/testbed"
	"pollux/testbed/fedlab"
	"pollux/testbed/launch"
)

// labOutcome is one lab's line of the federation demo's table.
type labOutcome struct {
	Lab              string
	Jobs, Completed  int
	AvgJCT           float64 // emulated seconds
	GPUHoursLent     float64 // emulated GPU-hours
	GPUHoursBorrowed float64
	// Reclaims are the lab's reclaims for its own jobs' need; Rebalances
	// those that moved a lease to another peer.
	Reclaims, Rebalances int
	// ReclaimToStartMax is the longest real time from a reclaim (the
	// lender's log) to the next start of one of its own jobs' workers on
	// its agents (their logs), over the Followed reclaims that such a
	// start followed.
	ReclaimToStartMax time.Duration
	Followed          int
	ForeignWorkers    int // workers of other labs' jobs its agents started
}

// fedDemoJobs are a lab's jobs: name-prefixed, submitted over its own
// window of the run, so that the labs' busy periods differ.
func fedDemoJobs(lab string, i, labs int, spread time.Duration) []launch.Job {
	apps := []string{"cifar10", "ncf", "cifar10", "deepspeech2"}
	window := spread / time.Duration(labs)
	jobs := make([]launch.Job, len(apps))
	for k, app := range apps {
		jobs[k] = launch.Job{Name: fmt.Sprintf("%s-%s-%d", strings.TrimPrefix(lab, "lab-"), app, k+1), App: app,
			After: window*time.Duration(i) + window*time.Duration(k)/time.Duration(len(apps))}
	}
	return jobs
}

// runFederationDemo runs three labs of tmpl's shape through their
// workloads, shows their progress, and prints a table per lab (jobs,
// average JCT, GPU-hours lent and borrowed, reclaims) observed from
// outside: the labs' APIs and their processes' logs. Every process is
// stopped on every way out.
func runFederationDemo(ctx context.Context, tmpl launch.Options, cat testbed.Catalog, spread, timeout time.Duration, out, errOut io.Writer) error {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	names := []string{"lab-a", "lab-b", "lab-c"}
	fmt.Fprintf(out, "starting %d labs of %d server(s) and %d agents of %d emulated GPUs on 127.0.0.1, each with its own CA (logs in %s)\n",
		len(names), tmpl.Servers, tmpl.Agents, tmpl.GPUsPerAgent, tmpl.Dir)
	gpus := tmpl.Agents * tmpl.GPUsPerAgent
	ls, err := fedlab.Start(runCtx, tmpl, names, federation.Quota{Nominal: gpus, LendingLimit: gpus, BorrowingLimit: 2 * gpus}, 500*time.Millisecond)
	defer func() {
		fmt.Fprintln(out, "stopping the labs")
		if err := ls.Stop(); err != nil {
			fmt.Fprintln(errOut, "pollux: demo:", err)
		}
	}()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	type pending struct {
		lab string
		job launch.Job
	}
	var queue []pending
	all := map[string][]string{}
	for i, n := range names {
		for _, j := range fedDemoJobs(n, i, len(names), spread) {
			queue = append(queue, pending{n, j})
			all[n] = append(all[n], j.Name)
		}
	}
	fmt.Fprintf(out, "submitting %d jobs to each lab in turn over %v; time runs %gx\n", len(queue)/len(names), spread, tmpl.TimeScale)
	outcome := map[string]*labOutcome{}
	for _, n := range names {
		outcome[n] = &labOutcome{Lab: n, Jobs: len(all[n])}
	}
	begin, last := time.Now(), time.Now()
	tick := 500 * time.Millisecond
	for {
		elapsed := time.Since(begin)
		for len(queue) > 0 && queue[0].job.After <= elapsed {
			p := queue[0]
			spec, err := p.job.Spec(cat, 16)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			if a := ls.Labs[p.lab].Client().SubmitAny(runCtx, p.job.Name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
				return fmt.Errorf("demo: submitting %s to %s: %s", p.job.Name, p.lab, a.Error())
			}
			queue = queue[1:]
		}
		dt := time.Since(last).Seconds() * tmpl.TimeScale / 3600
		last = time.Now()
		done := 0
		var line strings.Builder
		fmt.Fprintf(&line, "%5.0fs", elapsed.Seconds())
		for _, n := range names {
			cl := ls.Labs[n].Client()
			lent, borrowed, used, own := 0, 0, 0, 0
			if st, err := cl.StatusAny(runCtx); err == nil {
				used, own = st.GPUsUsed, st.GPUs
				if f := st.Federation; f != nil {
					lent, borrowed = f.Lent, f.Borrowed
				}
			}
			o := outcome[n]
			o.GPUHoursLent += float64(lent) * dt
			o.GPUHoursBorrowed += float64(borrowed) * dt
			js, _, err := cl.JobsAny(runCtx)
			if err != nil {
				continue
			}
			o.Completed, o.AvgJCT = 0, 0
			for _, j := range js {
				switch j.State {
				case "failed":
					return fmt.Errorf("demo: %s's job %s failed: %s", n, j.ID, j.Reason)
				case "completed":
					o.Completed++
					o.AvgJCT += (j.FinishTime - j.SubmitTime) * tmpl.TimeScale
				}
			}
			if o.Completed > 0 {
				o.AvgJCT /= float64(o.Completed)
			}
			done += o.Completed
			fmt.Fprintf(&line, "  %s: own GPUs %d, used %d, lent %d, borrowed %d, done %d/%d", n, own, used, lent, borrowed, o.Completed, o.Jobs)
		}
		fmt.Fprintln(out, line.String())
		if len(queue) == 0 && done == len(names)*len(all[names[0]]) {
			break
		}
		select {
		case <-runCtx.Done():
			return fmt.Errorf("demo: the workload did not finish within %v: %w", timeout, runCtx.Err())
		case <-time.After(tick):
		}
	}
	for _, n := range names {
		observeLogs(outcome[n], ls.Labs[n], all)
	}
	return writeFederationTable(out, names, outcome)
}

// observeLogs fills in what a lab's logs show: its reclaims (its
// server's log) and, on its agents, the workers of other labs' jobs and
// how long after each reclaim one of its own jobs' workers started.
func observeLogs(o *labOutcome, c *launch.Cluster, jobs map[string][]string) {
	var reclaims []time.Time
	for _, s := range c.Servers {
		o.Rebalances += len(fedlab.LogLines(s.Log, "federation: lease", "op=reclaim", "reason=rebalance"))
		for _, line := range fedlab.LogLines(s.Log, "federation: lease", "op=reclaim", "reason=need") {
			if at, ok := fedlab.LineTime(line); ok {
				reclaims = append(reclaims, at)
			}
		}
	}
	o.Reclaims = len(reclaims)
	var ownStarts []time.Time
	for _, a := range c.Agents {
		for _, line := range fedlab.LogLines(a.Log, "node: worker started") {
			own := false
			for _, j := range jobs[o.Lab] {
				own = own || strings.Contains(line, "job="+j+" ")
			}
			if !own {
				o.ForeignWorkers++
				continue
			}
			if at, ok := fedlab.LineTime(line); ok {
				ownStarts = append(ownStarts, at)
			}
		}
	}
	for _, r := range reclaims {
		for _, s := range ownStarts {
			if s.After(r) {
				o.ReclaimToStartMax = max(o.ReclaimToStartMax, s.Sub(r))
				o.Followed++
				break
			}
		}
	}
}

func writeFederationTable(w io.Writer, names []string, outcome map[string]*labOutcome) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lab\tjobs\tcompleted\tavg JCT (emulated s)\tGPU-h lent\tGPU-h borrowed\treclaims (need)\trebalances\treclaim to own start, max real s (of)\tother labs' workers run\t")
	for _, n := range names {
		o := outcome[n]
		latency := "-" // no own worker started after a reclaim
		if o.Followed > 0 {
			latency = fmt.Sprintf("%.1f (%d)", o.ReclaimToStartMax.Seconds(), o.Followed)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%d\t%d\t%s\t%d\t\n", o.Lab, o.Jobs, o.Completed, o.AvgJCT, o.GPUHoursLent,
			o.GPUHoursBorrowed, o.Reclaims, o.Rebalances, latency, o.ForeignWorkers)
	}
	return tw.Flush()
}
