package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"pollux/cluster/provider"
	"pollux/internal/usage"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// AutoscaleOptions are the settings of the autoscaling demo.
type AutoscaleOptions struct {
	// Servers servers and agents of GPUs emulated GPUs, up to MaxNodes
	// agents, each started Boot after it is asked for and removed
	// ScaleDownDelay after fewer are wanted; a node-hour costs Cost.
	Servers, GPUs, MaxNodes int
	Scale, Cost             float64
	// The jobs are submitted over Spread; Timeout bounds the run; Settle
	// the wait, after the last job, for the cluster to shrink to one
	// agent.
	Spread, Timeout, Boot  time.Duration
	ScaleDownDelay, Settle time.Duration
	// Dir is the run's directory ("": a temporary one, removed afterwards
	// unless Keep); JSON prints the summary as one JSON object.
	Dir        string
	Keep, JSON bool
	// Exec runs `pollux` (default: this binary) with Env added.
	Exec, Env []string
}

// AutoscaleSummary is what `pollux demo --autoscale --json` prints. The
// node figures are observed from outside the cluster: the agent
// processes that run, sampled every 250 ms.
type AutoscaleSummary struct {
	Jobs      int `json:"jobs"`
	Completed int `json:"completed"`
	Lost      int `json:"lost"`
	// StartNodes, PeakNodes and FinalNodes count running agents: at the
	// start, at most, and once the last job completed and the cluster
	// settled.
	StartNodes int `json:"start_nodes"`
	PeakNodes  int `json:"peak_nodes"`
	FinalNodes int `json:"final_nodes"`
	// Added names every agent the servers started; Timeline the running
	// agents at each change (real seconds since the start).
	Added    []string  `json:"added"`
	Timeline []NodesAt `json:"timeline"`
	// NodeHours are emulated node-hours (real time x --time-scale) and
	// Cost their price at --node-cost.
	NodeHours float64 `json:"node_hours"`
	Cost      float64 `json:"cost"`
	MeanJCT   float64 `json:"mean_jct_s"`
	// ProcessesLeft counts the servers' and agents' processes still
	// running after the demo stopped the cluster (0).
	ProcessesLeft int `json:"processes_left"`
}

// NodesAt is the running agents at one moment (real seconds since the
// start).
type NodesAt struct {
	T     float64 `json:"t_s"`
	Nodes int     `json:"nodes"`
}

// nodeWatch samples the running agents.
type nodeWatch struct {
	mu       sync.Mutex
	c        *launch.Cluster
	began    time.Time
	last     time.Time
	running  int
	nodeSecs float64
	peak     int
	added    []string
	timeline []NodesAt
	stop     chan struct{}
	done     chan struct{}
}

// sample counts the running agents now.
func (w *nodeWatch) sample() {
	auto := provider.Running(w.c.AutoscaleDir())
	n := len(auto)
	for _, m := range w.c.Agents {
		if m.Running() {
			n++
		}
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.last.IsZero() {
		w.nodeSecs += float64(w.running) * now.Sub(w.last).Seconds()
	}
	w.last = now
	for _, name := range auto {
		if !slices.Contains(w.added, name) {
			w.added = append(w.added, name)
		}
	}
	if len(w.timeline) == 0 || n != w.running {
		w.timeline = append(w.timeline, NodesAt{T: now.Sub(w.began).Seconds(), Nodes: n})
	}
	w.running, w.peak = n, max(w.peak, n)
}

// loop samples every 250 ms until stop.
func (w *nodeWatch) loop() {
	defer close(w.done)
	for {
		w.sample()
		select {
		case <-w.stop:
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// nodes is the running agents at the last sample.
func (w *nodeWatch) nodes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running
}

// Autoscale runs the autoscaling demo: the result on out, progress on
// errOut with o.JSON (else on out). It fails unless every job completed,
// the cluster grew, shrank back to one agent within o.Settle and left no
// process running.
func Autoscale(ctx context.Context, o AutoscaleOptions, out, errOut io.Writer) error {
	if o.Servers < 1 || o.GPUs < 1 || o.MaxNodes < 1 || !(o.Scale > 0) || o.Spread < 0 || o.Timeout <= 0 || o.Boot < 0 || !(o.Cost >= 0) ||
		o.Settle <= 0 || o.ScaleDownDelay < 0 {
		return usage.Wrap(errors.New("demo: --autoscale needs a server, GPUs, --max-nodes of at least 1, a positive time scale, timeout and settle time, " +
			"and a cost, boot delay and scale-down delay not negative"))
	}
	cat, err := builtin.Catalog()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	done, err := prepare(&o.Exec, &o.Dir, "pollux-demo-autoscale-", o.Keep)
	defer done()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	progress := out
	if o.JSON {
		progress = errOut
	}
	fmt.Fprintf(progress, "starting %d servers and 1 agent of %d emulated GPUs on 127.0.0.1; the servers add agents up to %d (boot delay %v) "+
		"and remove them (logs in %s)\n", o.Servers, o.GPUs, o.MaxNodes, o.Boot, o.Dir)
	c, err := launch.Start(ctx, launch.Options{Exec: o.Exec, Env: o.Env, Dir: o.Dir, Servers: o.Servers, Agents: 1, GPUsPerAgent: o.GPUs,
		TimeScale: o.Scale, Autoscale: &launch.Autoscale{MinNodes: 1, MaxNodes: o.MaxNodes, BootDelay: o.Boot, NodeCost: o.Cost,
			JoinTimeout: 2 * time.Minute, ScaleDownDelay: o.ScaleDownDelay}})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	r := &autoscaleRun{o: o, c: c, progress: progress, w: &nodeWatch{c: c, began: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}}
	r.w.sample()
	go r.w.loop()
	defer func() {
		if err := r.stop(); err != nil {
			fmt.Fprintln(errOut, "pollux: demo:", err)
		}
	}()
	fmt.Fprintf(progress, "mutual TLS and encrypted gossip on; every agent the servers add gets its own certificate from the cluster CA (%s)\n", c.TLS().Dir)
	return r.run(ctx, cat, out)
}

// autoscaleRun is the autoscaling demo's cluster, running.
type autoscaleRun struct {
	o        AutoscaleOptions
	c        *launch.Cluster
	w        *nodeWatch
	progress io.Writer
	stopped  bool
}

// stop stops the sampling and the cluster, once.
func (r *autoscaleRun) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	close(r.w.stop)
	<-r.w.done
	fmt.Fprintln(r.progress, "stopping the cluster")
	return r.c.Stop()
}

// run submits the demo workload, waits for the cluster to shrink back,
// stops it and prints the summary.
func (r *autoscaleRun) run(ctx context.Context, cat testbed.Catalog, out io.Writer) error {
	o, w := r.o, r.w
	sum := AutoscaleSummary{StartNodes: w.nodes()}
	jobs := launch.DemoWorkload(o.Spread)
	sum.Jobs = len(jobs)
	fmt.Fprintf(r.progress, "submitting %d jobs over %v; time runs %gx\n", len(jobs), o.Spread, o.Scale)
	res, runErr := r.c.Run(ctx, cat, jobs, launch.RunOptions{TimeScale: o.Scale, Progress: &nodesPrefix{w: w, out: r.progress}})
	for _, j := range res {
		if j.Job.State == "completed" {
			sum.Completed++
			sum.MeanJCT += j.JCT
		}
	}
	if sum.Completed > 0 {
		sum.MeanJCT /= float64(sum.Completed)
	}
	sum.Lost = sum.Jobs - sum.Completed
	if runErr == nil {
		// The last jobs finished: the servers remove the agents they added.
		fmt.Fprintf(r.progress, "all jobs completed; waiting up to %v for the cluster to shrink to 1 node\n", o.Settle)
		deadline := time.Now().Add(o.Settle)
		for w.nodes() > 1 && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
		}
	}
	sum.FinalNodes = w.nodes()
	stopErr := r.stop()
	r.finish(&sum)
	if err := r.print(out, res, sum); err != nil {
		return err
	}
	return problems(sum, o.Settle, runErr, stopErr)
}

// finish fills in the summary's figures from the samples and the
// processes left running.
func (r *autoscaleRun) finish(sum *AutoscaleSummary) {
	w := r.w
	w.mu.Lock()
	sum.PeakNodes, sum.Added, sum.Timeline = w.peak, slices.Clone(w.added), slices.Clone(w.timeline)
	sum.NodeHours = w.nodeSecs * r.o.Scale / 3600
	w.mu.Unlock()
	sum.Cost = sum.NodeHours * r.o.Cost
	sum.ProcessesLeft = len(provider.Running(r.c.AutoscaleDir()))
	for _, m := range append(slices.Clone(r.c.Servers), r.c.Agents...) {
		if m.Running() {
			sum.ProcessesLeft++
		}
	}
}

// print prints the summary: one JSON object, or the jobs' results and
// the summary's lines.
func (r *autoscaleRun) print(out io.Writer, res []launch.Result, sum AutoscaleSummary) error {
	if r.o.JSON {
		return json.NewEncoder(out).Encode(sum)
	}
	if len(res) > 0 {
		if err := launch.WriteResults(out, res); err != nil {
			return err
		}
	}
	writeAutoscaleSummary(out, sum)
	return nil
}

// problems is why the demo fails, if it does.
func problems(sum AutoscaleSummary, settle time.Duration, runErr, stopErr error) error {
	var problems []error
	if runErr != nil {
		problems = append(problems, runErr)
	}
	if stopErr != nil {
		problems = append(problems, stopErr)
	}
	if sum.Lost > 0 {
		problems = append(problems, fmt.Errorf("%d of %d jobs did not complete", sum.Lost, sum.Jobs))
	}
	if sum.PeakNodes <= sum.StartNodes {
		problems = append(problems, errors.New("the cluster never grew"))
	}
	if runErr == nil && sum.FinalNodes > 1 {
		problems = append(problems, fmt.Errorf("the cluster did not shrink back to 1 node within %v (%d)", settle, sum.FinalNodes))
	}
	if sum.ProcessesLeft > 0 {
		problems = append(problems, fmt.Errorf("%d processes still run", sum.ProcessesLeft))
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo: %w", errors.Join(problems...))
	}
	return nil
}

// writeAutoscaleSummary prints the summary of the table output.
func writeAutoscaleSummary(w io.Writer, s AutoscaleSummary) {
	fmt.Fprintf(w, "jobs: %d submitted, %d completed, %d lost; mean JCT %.0f emulated s\n", s.Jobs, s.Completed, s.Lost, s.MeanJCT)
	fmt.Fprintf(w, "nodes: %d at the start, %d at most, %d at the end; agents added: %v\n", s.StartNodes, s.PeakNodes, s.FinalNodes, s.Added)
	fmt.Fprintf(w, "node-hours (emulated): %.2f, cost %.2f\n", s.NodeHours, s.Cost)
	fmt.Fprint(w, "nodes over time (real s):")
	for _, p := range s.Timeline {
		fmt.Fprintf(w, " %.0fs:%d", p.T, p.Nodes)
	}
	fmt.Fprintf(w, "\nprocesses left running: %d\n", s.ProcessesLeft)
}

// nodesPrefix adds the running agents to every progress line.
type nodesPrefix struct {
	w   *nodeWatch
	out io.Writer
}

func (p *nodesPrefix) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.out, "nodes %d  %s", p.w.nodes(), b); err != nil {
		return 0, err
	}
	return len(b), nil
}
