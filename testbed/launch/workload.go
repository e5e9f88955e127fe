package launch

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"pollux/actors/server/api"
	"pollux/optimizer"
	"pollux/testbed"
)

// Job is one job of a workload: a built-in application submitted After
// the start of the run (real time).
type Job struct {
	Name  string
	App   string
	After time.Duration
	// GPUType and Topology are the job's constraints (gpu_type,
	// topology: {required|preferred: LEVEL}), if set; MinReplicas its
	// min_replicas (0: the default, 1).
	GPUType     string
	Topology    optimizer.TopologyConstraint
	MinReplicas int
}

// Spec is the YAML spec of j, with the batch limits and the epochs of
// its application in the catalog and up to maxReplicas GPUs.
func (j Job) Spec(cat testbed.Catalog, maxReplicas int) ([]byte, error) {
	app := cat[j.App]
	if app == nil {
		return nil, fmt.Errorf("%w: unknown application %q", ErrConfig, j.App)
	}
	l := app.Limits()
	b := fmt.Appendf(nil, "name: %s\napplication: %s\nmax_replicas: %d\ninit_batch_size: %d\nmax_batch_size: %d\n"+
		"min_local_batch_size: %d\nmax_local_batch_size: %d\naccumulation: %t\nepochs: %d\n",
		j.Name, j.App, maxReplicas, l.InitBatch, l.MaxBatch, l.MinLocal, l.MaxLocal, l.Accumulation, app.MaxEpochs())
	if j.GPUType != "" {
		b = fmt.Appendf(b, "gpu_type: %s\n", j.GPUType)
	}
	if j.MinReplicas > 0 {
		b = fmt.Appendf(b, "min_replicas: %d\n", j.MinReplicas)
	}
	switch {
	case j.Topology.Required != "":
		b = fmt.Appendf(b, "topology: {required: %s}\n", j.Topology.Required)
	case j.Topology.Preferred != "":
		b = fmt.Appendf(b, "topology: {preferred: %s}\n", j.Topology.Preferred)
	}
	return b, nil
}

// DemoWorkload is a small mixed workload of a dozen jobs arriving over
// the first spread of real time.
func DemoWorkload(spread time.Duration) []Job {
	apps := []string{"cifar10", "ncf", "deepspeech2", "cifar10", "bert", "cifar10", "ncf", "deepspeech2", "cifar10", "bert", "cifar10", "deepspeech2"}
	jobs := make([]Job, len(apps))
	for i, app := range apps {
		jobs[i] = Job{Name: fmt.Sprintf("%s-%d", app, i+1), App: app, After: spread * time.Duration(i) / time.Duration(len(apps))}
	}
	return jobs
}

// Result is one finished job of a run.
type Result struct {
	Job api.Job
	// JCT is the job's completion time in the cluster's (emulated)
	// seconds.
	JCT float64
}

// RunOptions tune Run.
type RunOptions struct {
	// TimeScale converts real seconds into the emulated seconds results
	// are reported in.
	TimeScale float64
	// Progress, if set, receives one status line per tick.
	Progress io.Writer
	// Tick is the polling interval (default 1 s).
	Tick time.Duration
	// OnTick, if set, is called every tick with the time since the start
	// (tests inject faults through it).
	OnTick func(elapsed time.Duration)
}

// Run submits jobs at their times and waits until all of them have
// completed. It fails if a job fails or ctx ends first.
func (c *Cluster) Run(ctx context.Context, cat testbed.Catalog, jobs []Job, o RunOptions) ([]Result, error) {
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if !(o.TimeScale > 0) {
		o.TimeScale = 1
	}
	pending := slices.Clone(jobs)
	slices.SortStableFunc(pending, func(a, b Job) int { return cmp.Compare(a.After, b.After) })
	cl := c.Client()
	begin := time.Now()
	for {
		elapsed := time.Since(begin)
		for len(pending) > 0 && pending[0].After <= elapsed {
			spec, err := pending[0].Spec(cat, 16)
			if err != nil {
				return nil, err
			}
			if a := cl.SubmitAny(ctx, pending[0].Name, spec, 250*time.Millisecond, 30*time.Second); !a.OK() {
				return nil, fmt.Errorf("launch: submitting %s: %s", pending[0].Name, a.Error())
			}
			pending = pending[1:]
		}
		if o.OnTick != nil {
			o.OnTick(elapsed)
		}
		js, _, jerr := cl.JobsAny(ctx)
		st, serr := cl.StatusAny(ctx)
		if jerr == nil && serr == nil {
			done := 0
			for _, j := range js {
				switch j.State {
				case "completed":
					done++
				case "failed":
					return nil, fmt.Errorf("launch: job %s failed: %s", j.ID, j.Reason)
				}
			}
			if o.Progress != nil {
				fmt.Fprintln(o.Progress, progressLine(elapsed, o.TimeScale, st, js))
			}
			if len(pending) == 0 && done == len(jobs) {
				return results(js, o.TimeScale), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("launch: run interrupted after %v: %w", elapsed.Round(time.Second), ctx.Err())
		case <-time.After(o.Tick):
		}
	}
}

func progressLine(elapsed time.Duration, scale float64, st api.Status, js []api.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5.0fs (emulated %6.0fs)  leader %-3s gen %-4d GPUs %2d/%-2d  done %d/%d ",
		elapsed.Seconds(), elapsed.Seconds()*scale, st.Leader, st.Generation, st.GPUsUsed, st.GPUs, st.Jobs["completed"], len(js))
	for _, j := range js {
		if j.GPUs > 0 {
			fmt.Fprintf(&b, " %s:%dG/e%d", j.ID, j.GPUs, j.Epoch)
		}
	}
	return b.String()
}

func results(js []api.Job, scale float64) []Result {
	out := make([]Result, 0, len(js))
	for _, j := range js {
		out = append(out, Result{Job: j, JCT: (j.FinishTime - j.SubmitTime) * scale})
	}
	return out
}

// WriteResults prints a JCT table and the average.
func WriteResults(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "job\tapplication\trestarts\tlargest K*m\tJCT (emulated s)\t")
	sum := 0.0
	for _, r := range rs {
		largest := 0
		for _, p := range r.Job.Profiled {
			largest = max(largest, p.Replicas*p.LocalBatch)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t\n", r.Job.ID, r.Job.App, r.Job.Restarts, largest, r.JCT)
		sum += r.JCT
	}
	if len(rs) > 0 {
		fmt.Fprintf(tw, "average\t\t\t\t%.0f\t\n", sum/float64(len(rs)))
	}
	return tw.Flush()
}
