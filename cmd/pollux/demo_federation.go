package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"pollux/actors/fedlink"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/testbed"
	"pollux/testbed/launch"
)

// labSet is the labs of a federation started on this machine, by name.
type labSet struct {
	names []string
	labs  map[string]*launch.Cluster
}

// startLabs starts one lab per name (each with its own CA from
// pki.DevLabBundle, a federation file naming every other lab as a peer
// with its CA, and a federation listener on loopback), every lab with
// the servers, agents and clocks of tmpl, in tmpl.Dir/<name>, each with
// its own checkpoint root (tmpl.Dir/<name>/checkpoints), which every
// peer's federation file declares as that lab's (docs/federation.md,
// "Checkpoints": on one machine every agent reaches every root). The
// labs started are returned also on error, to be stopped.
func startLabs(ctx context.Context, tmpl launch.Options, names []string, quota federation.Quota, interval time.Duration) (*labSet, error) {
	return startLabsWith(ctx, tmpl, names, quota, interval, federation.DefaultSettings(), nil)
}

// startLabsWith is startLabs with the federation's terms (lease time to
// live, ...) given, and shape, when not nil, called on each lab's
// federation file before it is written (a quota or peers of its own).
func startLabsWith(ctx context.Context, tmpl launch.Options, names []string, quota federation.Quota, interval time.Duration,
	terms federation.Settings, shape func(lab string, f *fedlink.File)) (*labSet, error) {
	ls := &labSet{names: names, labs: map[string]*launch.Cluster{}}
	// Each lab's federation port stays held until that lab starts: the
	// labs started before it must not be given it (their own ports,
	// their outgoing connections).
	fedPorts, err := launch.ReservePorts(len(names))
	if err != nil {
		return ls, err
	}
	defer fedPorts.Close()
	addrs, bundles := map[string]string{}, map[string]*pki.Bundle{}
	var servers, agents []string
	for i := range max(tmpl.Servers, 1) {
		servers = append(servers, fmt.Sprintf("s%d", i))
	}
	for i := range tmpl.Agents {
		agents = append(agents, fmt.Sprintf("a%d", i))
	}
	for i, n := range names {
		addrs[n] = fmt.Sprintf("127.0.0.1:%d", fedPorts.Ports[i])
		if bundles[n], err = pki.DevLabBundle(filepath.Join(tmpl.Dir, n, "tls"), n, servers, agents); err != nil {
			return ls, err
		}
	}
	for i, n := range names {
		f := fedlink.File{Quota: quota, Terms: &terms}
		for _, p := range names {
			if p != n {
				f.Peers = append(f.Peers, fedlink.PeerFile{Name: p, Addresses: []string{addrs[p]}, CAFile: bundles[p].CA,
					CheckpointRoot: filepath.Join(tmpl.Dir, p, "checkpoints")})
			}
		}
		if shape != nil {
			shape(n, &f)
		}
		raw, err := json.Marshal(f)
		if err != nil {
			return ls, err
		}
		fedFile := filepath.Join(tmpl.Dir, n, "federation.json")
		if err := os.WriteFile(fedFile, raw, 0o644); err != nil {
			return ls, err
		}
		o := tmpl
		o.Dir, o.Bundle, o.CheckpointRoot = filepath.Join(tmpl.Dir, n), bundles[n], filepath.Join(tmpl.Dir, n, "checkpoints")
		o.ServerArgs = append(append([]string(nil), tmpl.ServerArgs...), "--cluster", n, "--federation", fedFile,
			"--federation-addr", addrs[n], "--federation-interval", interval.String())
		fedPorts.Release(i)
		c, err := launch.Start(ctx, o)
		if c != nil {
			ls.labs[n] = c
		}
		if err != nil {
			return ls, fmt.Errorf("lab %s: %w", n, err)
		}
	}
	return ls, nil
}

// stop stops every process of every lab.
func (ls *labSet) stop() error {
	var errs []error
	for _, n := range ls.names {
		if c := ls.labs[n]; c != nil {
			if err := c.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("lab %s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

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
	ls, err := startLabs(runCtx, tmpl, names, federation.Quota{Nominal: gpus, LendingLimit: gpus, BorrowingLimit: 2 * gpus}, 500*time.Millisecond)
	defer func() {
		fmt.Fprintln(out, "stopping the labs")
		if err := ls.stop(); err != nil {
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
			if a := ls.labs[p.lab].Client().SubmitAny(runCtx, p.job.Name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
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
			cl := ls.labs[n].Client()
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
		observeLogs(outcome[n], ls.labs[n], all)
	}
	return writeFederationTable(out, names, outcome)
}

// observeLogs fills in what a lab's logs show: its reclaims (its
// server's log) and, on its agents, the workers of other labs' jobs and
// how long after each reclaim one of its own jobs' workers started.
func observeLogs(o *labOutcome, c *launch.Cluster, jobs map[string][]string) {
	var reclaims []time.Time
	for _, s := range c.Servers {
		o.Rebalances += len(logLines(s.Log, "federation: lease", "op=reclaim", "reason=rebalance"))
		for _, line := range logLines(s.Log, "federation: lease", "op=reclaim", "reason=need") {
			if at, ok := lineTime(line); ok {
				reclaims = append(reclaims, at)
			}
		}
	}
	o.Reclaims = len(reclaims)
	var ownStarts []time.Time
	for _, a := range c.Agents {
		for _, line := range logLines(a.Log, "node: worker started") {
			own := false
			for _, j := range jobs[o.Lab] {
				own = own || strings.Contains(line, "job="+j+" ")
			}
			if !own {
				o.ForeignWorkers++
				continue
			}
			if at, ok := lineTime(line); ok {
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

// logLines are the lines of the log file at path that contain every one
// of subs.
func logLines(path string, subs ...string) []string {
	b, _ := os.ReadFile(path)
	return logbuf.Matching(string(b), subs...)
}

// lineTime is the time= field of a log line.
func lineTime(line string) (time.Time, bool) {
	_, rest, _ := strings.Cut(line, "time=")
	ts, _, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	return at, err == nil
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
