package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"pollux/cluster/federation"
	"pollux/testbed"
	"pollux/testbed/builtin"
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

// Federation runs three labs of o.Cluster's shape through their
// workloads, submitted over o.Spread within o.Timeout, shows their
// progress, and prints a table per lab (jobs, average JCT, GPU-hours lent
// and borrowed, reclaims) observed from outside: the labs' APIs and their
// processes' logs. Every process is stopped on every way out.
func Federation(ctx context.Context, o Options, out, errOut io.Writer) error {
	cat, err := builtin.Catalog()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	tmpl := o.Cluster
	done, err := prepare(&tmpl.Exec, &tmpl.Dir, "pollux-demo-", o.Keep)
	defer done()
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
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
	f := &fedRun{ls: ls, cat: cat, scale: tmpl.TimeScale, all: map[string][]string{}, outcome: map[string]*labOutcome{}}
	for i, n := range names {
		for _, j := range fedDemoJobs(n, i, len(names), o.Spread) {
			f.queue = append(f.queue, pending{n, j})
			f.all[n] = append(f.all[n], j.Name)
		}
	}
	fmt.Fprintf(out, "submitting %d jobs to each lab in turn over %v; time runs %gx\n", len(f.queue)/len(names), o.Spread, tmpl.TimeScale)
	for _, n := range names {
		f.outcome[n] = &labOutcome{Lab: n, Jobs: len(f.all[n])}
	}
	if err := f.run(runCtx, o.Timeout, out); err != nil {
		return err
	}
	for _, n := range names {
		observeLogs(f.outcome[n], ls.Labs[n], f.all)
	}
	return writeFederationTable(out, names, f.outcome)
}

// pending is a job not submitted yet, and its lab.
type pending struct {
	lab string
	job launch.Job
}

// fedRun is the federation demo's labs, running their workloads.
type fedRun struct {
	ls      *fedlab.Set
	cat     testbed.Catalog
	scale   float64
	queue   []pending
	all     map[string][]string // every lab's jobs
	outcome map[string]*labOutcome
}

// run submits the jobs as they fall due and prints a line of the labs'
// state every half second until every job completed.
func (f *fedRun) run(ctx context.Context, timeout time.Duration, out io.Writer) error {
	names := f.ls.Names
	begin, last := time.Now(), time.Now()
	tick := 500 * time.Millisecond
	for {
		elapsed := time.Since(begin)
		for len(f.queue) > 0 && f.queue[0].job.After <= elapsed {
			p := f.queue[0]
			spec, err := p.job.Spec(f.cat, 16)
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			if a := f.ls.Labs[p.lab].Client().SubmitAny(ctx, p.job.Name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
				return fmt.Errorf("demo: submitting %s to %s: %s", p.job.Name, p.lab, a.Error())
			}
			f.queue = f.queue[1:]
		}
		dt := time.Since(last).Seconds() * f.scale / 3600
		last = time.Now()
		done := 0
		var line strings.Builder
		fmt.Fprintf(&line, "%5.0fs", elapsed.Seconds())
		for _, n := range names {
			completed, err := f.observe(ctx, n, dt, &line)
			if err != nil {
				return err
			}
			done += completed
		}
		fmt.Fprintln(out, line.String())
		if len(f.queue) == 0 && done == len(names)*len(f.all[names[0]]) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: the workload did not finish within %v: %w", timeout, ctx.Err())
		case <-time.After(tick):
		}
	}
}

// observe reads lab n's status and jobs, adds dt hours of its lending
// and borrowing to its outcome and its part of the progress line, and
// returns its completed jobs; it fails if one of its jobs failed.
func (f *fedRun) observe(ctx context.Context, n string, dt float64, line *strings.Builder) (int, error) {
	cl := f.ls.Labs[n].Client()
	lent, borrowed, used, own := 0, 0, 0, 0
	if st, err := cl.StatusAny(ctx); err == nil {
		used, own = st.GPUsUsed, st.GPUs
		if fs := st.Federation; fs != nil {
			lent, borrowed = fs.Lent, fs.Borrowed
		}
	}
	o := f.outcome[n]
	o.GPUHoursLent += float64(lent) * dt
	o.GPUHoursBorrowed += float64(borrowed) * dt
	js, _, err := cl.JobsAny(ctx)
	if err != nil {
		return 0, nil
	}
	o.Completed, o.AvgJCT = 0, 0
	for _, j := range js {
		switch j.State {
		case "failed":
			return 0, fmt.Errorf("demo: %s's job %s failed: %s", n, j.ID, j.Reason)
		case "completed":
			o.Completed++
			o.AvgJCT += (j.FinishTime - j.SubmitTime) * f.scale
		}
	}
	if o.Completed > 0 {
		o.AvgJCT /= float64(o.Completed)
	}
	fmt.Fprintf(line, "  %s: own GPUs %d, used %d, lent %d, borrowed %d, done %d/%d", n, own, used, lent, borrowed, o.Completed, o.Jobs)
	return o.Completed, nil
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
