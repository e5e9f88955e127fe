package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/cluster/provider"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// autoscaleDemoOpts are `pollux demo --autoscale`'s settings.
type autoscaleDemoOpts struct {
	servers, gpus, maxNodes int
	scale, cost             float64
	spread, timeout, boot   time.Duration
	scaleDownDelay, settle  time.Duration
	dir                     string
	keep, asJSON            bool
	// exec runs `pollux` (default: this binary) with env added.
	exec, env []string
}

// autoscaleSummary is what `pollux demo --autoscale --json` prints. The
// node figures are observed from outside the cluster: the agent
// processes that run, sampled every 250 ms.
type autoscaleSummary struct {
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
	Added    []string       `json:"added"`
	Timeline []nodesAtPoint `json:"timeline"`
	// NodeHours are emulated node-hours (real time x --time-scale) and
	// Cost their price at --node-cost.
	NodeHours float64 `json:"node_hours"`
	Cost      float64 `json:"cost"`
	MeanJCT   float64 `json:"mean_jct_s"`
	// ProcessesLeft counts the servers' and agents' processes still
	// running after the demo stopped the cluster (0).
	ProcessesLeft int `json:"processes_left"`
}

type nodesAtPoint struct {
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
	timeline []nodesAtPoint
	stop     chan struct{}
	done     chan struct{}
}

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
		w.timeline = append(w.timeline, nodesAtPoint{T: now.Sub(w.began).Seconds(), Nodes: n})
	}
	w.running, w.peak = n, max(w.peak, n)
}

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

func (w *nodeWatch) nodes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running
}

func runAutoscaleDemoCmd(cmd *cobra.Command, o autoscaleDemoOpts) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runAutoscaleDemo(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
}

// runAutoscaleDemo runs `pollux demo --autoscale`: the result on out,
// progress on errOut with --json (else on out).
func runAutoscaleDemo(ctx context.Context, out, errOut io.Writer, o autoscaleDemoOpts) error {
	if o.servers < 1 || o.gpus < 1 || o.maxNodes < 1 || !(o.scale > 0) || o.spread < 0 || o.timeout <= 0 || o.boot < 0 || !(o.cost >= 0) || o.settle <= 0 ||
		o.scaleDownDelay < 0 {
		return badInput(errors.New("demo: --autoscale needs a server, GPUs, --max-nodes of at least 1, a positive time scale, timeout and settle time, " +
			"and a cost, boot delay and scale-down delay not negative"))
	}
	cat, err := builtin.Catalog()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if len(o.exec) == 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		o.exec = []string{self}
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pollux-demo-autoscale-"); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	progress := out
	if o.asJSON {
		progress = errOut
	}
	fmt.Fprintf(progress, "starting %d servers and 1 agent of %d emulated GPUs on 127.0.0.1; the servers add agents up to %d (boot delay %v) "+
		"and remove them (logs in %s)\n", o.servers, o.gpus, o.maxNodes, o.boot, dir)
	c, err := launch.Start(ctx, launch.Options{Exec: o.exec, Env: o.env, Dir: dir, Servers: o.servers, Agents: 1, GPUsPerAgent: o.gpus,
		TimeScale: o.scale, Autoscale: &launch.Autoscale{MinNodes: 1, MaxNodes: o.maxNodes, BootDelay: o.boot, NodeCost: o.cost,
			JoinTimeout: 2 * time.Minute, ScaleDownDelay: o.scaleDownDelay}})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	w := &nodeWatch{c: c, began: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	w.sample()
	go w.loop()
	stopped := false
	stopCluster := func() error {
		if stopped {
			return nil
		}
		stopped = true
		close(w.stop)
		<-w.done
		fmt.Fprintln(progress, "stopping the cluster")
		return c.Stop()
	}
	defer func() {
		if err := stopCluster(); err != nil {
			fmt.Fprintln(errOut, "pollux: demo:", err)
		}
	}()
	fmt.Fprintf(progress, "mutual TLS and encrypted gossip on; every agent the servers add gets its own certificate from the cluster CA (%s)\n", c.TLS().Dir)
	sum := autoscaleSummary{StartNodes: w.nodes()}
	jobs := launch.DemoWorkload(o.spread)
	sum.Jobs = len(jobs)
	fmt.Fprintf(progress, "submitting %d jobs over %v; time runs %gx\n", len(jobs), o.spread, o.scale)
	res, runErr := c.Run(ctx, cat, jobs, launch.RunOptions{TimeScale: o.scale, Progress: &nodesPrefix{w: w, out: progress}})
	for _, r := range res {
		if r.Job.State == "completed" {
			sum.Completed++
			sum.MeanJCT += r.JCT
		}
	}
	if sum.Completed > 0 {
		sum.MeanJCT /= float64(sum.Completed)
	}
	sum.Lost = sum.Jobs - sum.Completed
	if runErr == nil {
		// The last jobs finished: the servers remove the agents they added.
		fmt.Fprintf(progress, "all jobs completed; waiting up to %v for the cluster to shrink to 1 node\n", o.settle)
		deadline := time.Now().Add(o.settle)
		for w.nodes() > 1 && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
		}
	}
	sum.FinalNodes = w.nodes()
	stopErr := stopCluster()
	w.mu.Lock()
	sum.PeakNodes, sum.Added, sum.Timeline = w.peak, slices.Clone(w.added), slices.Clone(w.timeline)
	sum.NodeHours = w.nodeSecs * o.scale / 3600
	w.mu.Unlock()
	sum.Cost = sum.NodeHours * o.cost
	sum.ProcessesLeft = len(provider.Running(c.AutoscaleDir()))
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		if m.Running() {
			sum.ProcessesLeft++
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		if err := enc.Encode(sum); err != nil {
			return err
		}
	} else {
		if len(res) > 0 {
			if err := launch.WriteResults(out, res); err != nil {
				return err
			}
		}
		writeAutoscaleSummary(out, sum)
	}
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
		problems = append(problems, fmt.Errorf("the cluster did not shrink back to 1 node within %v (%d)", o.settle, sum.FinalNodes))
	}
	if sum.ProcessesLeft > 0 {
		problems = append(problems, fmt.Errorf("%d processes still run", sum.ProcessesLeft))
	}
	if len(problems) > 0 {
		return fmt.Errorf("demo: %w", errors.Join(problems...))
	}
	return nil
}

func writeAutoscaleSummary(w io.Writer, s autoscaleSummary) {
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
