package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/node/worker"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/launch"
	"pollux/testbed/realdemo"
)

func init() { subcommands = append(subcommands, newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var (
		servers, agents, gpus int
		scale                 float64
		spread, timeout       time.Duration
		dir                   string
		keep                  bool
		real, asJSON, ui      bool
		autoscale, federated  bool
		maxNodes              int
		nodeCost              float64
		bootDelay, settle     time.Duration
		scaleDownDelay        time.Duration
		realOpts              realdemo.Options
		augment, minEpochs    int
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole cluster on this machine (servers, agents, emulated GPU workers) through a small mixed workload",
		Long: `demo starts --servers control-plane servers and --agents node agents of
--gpus emulated GPUs each as separate processes on 127.0.0.1, submits a
dozen jobs of the built-in applications over --spread, shows the cluster's
progress once a second (leader, allocation generation, GPUs in use, each
running job's GPUs and epoch), prints the job completion times and stops
every process it started, also on Ctrl-C. Emulated time runs --time-scale
times faster than real time.

With --ui it prints a line "dashboard: URL" once the cluster runs: the
web dashboard of the first server (docs/dashboard.md), with a read token
in the URL that the page exchanges for a cookie. After the workload the
cluster stays up for it (--timeout bounds the workload only) until
Ctrl-C or SIGTERM, which stop every process.

With --real it runs real PyTorch training instead (Debian's python3-torch
and python3-sklearn through /usr/bin/python3, or --python): 3 servers and
2 agents offering --cpu-slots CPU slots each, and three jobs of the
worker library's digits examples (two CNNs, then an MLP) submitted over
--spread (default 30s), each trained to its target accuracy for at least
--min-epochs epochs. The servers weigh job ages --time-scale (default 20)
times faster than real time, so that the restart penalty fits restarts
of a second or two. Progress goes to stderr; the result (per job: the
accuracy reached, its target, the incarnations, the batch size and
replicas of each incarnation that trained, the completion time) is a
table on stdout, or one JSON object with --json. It exits 1 if a job
failed, fell short of its target or was resized fewer than twice. On two
busy cores it takes 2 to 3 minutes (docs/worker-library.md).

With --autoscale it starts --servers servers and one agent; the servers
run the Pollux autoscaler with the local provider, which starts more
agents (up to --max-nodes, each after --boot-delay, each with its own
certificate from the cluster CA) while the dozen jobs arrive and removes
them (drained first) as they finish. It prints the job completion times
and a summary observed from the agent processes (nodes at the start, at
most, at the end, node-hours and their cost at --node-cost, processes
left), or one JSON object with --json, and exits 1 if a job did not
complete, the cluster never grew or did not shrink back to one node
within --settle, or a process was left running (docs/autoscaling.md).

With --federation it starts three labs (lab-a, lab-b, lab-c), each with
its own CA, --servers servers (default 1) and --agents agents (default
2) of --gpus emulated GPUs (default 2), federated over mutual TLS on
loopback, and submits four jobs to each lab in turn over --spread
(default 45s), so that their busy periods differ: an idle lab lends its
nodes to a busy one, whose jobs then run on the lender's agents, and
takes them back (a reclaim) when its own jobs arrive. It prints each
lab's GPUs, leases and jobs once every half second and, at the end, a
table per lab observed from outside (the labs' APIs and logs): jobs,
average JCT, GPU-hours lent and borrowed, reclaims, the longest time from
a reclaim to the start of one of the lender's own workers, and the
workers of other labs its agents ran (docs/federation.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if federated {
				for _, name := range []string{"real", "ui", "json", "autoscale", "cpu-slots", "python", "augment", "min-epochs",
					"max-nodes", "node-cost", "boot-delay", "scale-down-delay", "settle"} {
					if f.Changed(name) {
						return badInput(fmt.Errorf("demo: --%s cannot be used with --federation", name))
					}
				}
				if !f.Changed("servers") {
					servers = 1
				}
				if !f.Changed("agents") {
					agents = 2
				}
				if !f.Changed("gpus") {
					gpus = 2
				}
				if !f.Changed("spread") {
					spread = 45 * time.Second
				}
				if !f.Changed("timeout") {
					timeout = 10 * time.Minute
				}
			}
			if autoscale {
				for _, name := range []string{"real", "ui", "cpu-slots", "python", "augment", "min-epochs", "agents"} {
					if f.Changed(name) {
						return badInput(fmt.Errorf("demo: --%s cannot be used with --autoscale", name))
					}
				}
				return runAutoscaleDemoCmd(cmd, autoscaleDemoOpts{servers: servers, gpus: gpus, maxNodes: maxNodes, scale: scale, cost: nodeCost,
					spread: spread, timeout: timeout, boot: bootDelay, scaleDownDelay: scaleDownDelay, settle: settle, dir: dir, keep: keep, asJSON: asJSON})
			}
			for _, name := range []string{"max-nodes", "node-cost", "boot-delay", "scale-down-delay", "settle"} {
				if f.Changed(name) {
					return badInput(fmt.Errorf("demo: --%s needs --autoscale", name))
				}
			}
			if real {
				for _, name := range []string{"gpus", "ui"} {
					if f.Changed(name) {
						return badInput(fmt.Errorf("demo: --%s is for emulated jobs, not --real", name))
					}
				}
				realOpts.Servers, realOpts.Agents = servers, 2
				if f.Changed("time-scale") {
					realOpts.TimeScale = scale
				}
				if f.Changed("agents") {
					realOpts.Agents = agents
				}
				if !f.Changed("spread") {
					spread = 30 * time.Second
				}
				if !f.Changed("timeout") {
					timeout = 20 * time.Minute
				}
				return runRealDemoCmd(cmd, realOpts, augment, minEpochs, spread, timeout, dir, keep, asJSON)
			}
			for _, name := range []string{"json", "cpu-slots", "python", "augment", "min-epochs"} {
				if f.Changed(name) {
					return badInput(fmt.Errorf("demo: --%s needs --real (or --autoscale for --json)", name))
				}
			}
			if servers < 1 || agents < 1 || gpus < 1 || !(scale > 0) || spread < 0 || timeout <= 0 {
				return badInput(fmt.Errorf("demo: need at least one server, agent and GPU, a positive time scale and timeout"))
			}
			cat, err := builtin.Catalog()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "pollux-demo-"); err != nil {
					return fmt.Errorf("demo: %w", err)
				}
				if !keep {
					defer os.RemoveAll(dir)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o := launch.Options{Exec: []string{self}, Dir: dir, Servers: servers, Agents: agents, GPUsPerAgent: gpus, TimeScale: scale}
			if federated {
				return runFederationDemo(ctx, o, cat, spread, timeout, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runDemo(ctx, o, cat, spread, timeout, ui, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&servers, "servers", 3, "control-plane servers")
	f.IntVar(&agents, "agents", 4, "node agents (--real: default 2)")
	f.IntVar(&gpus, "gpus", 4, "emulated GPUs per agent")
	f.Float64Var(&scale, "time-scale", 300, "emulated seconds per real second (--real: the servers' clock rate for job ages, default 20)")
	f.DurationVar(&spread, "spread", 30*time.Second, "real time over which the jobs are submitted (--real: default 30s)")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "give up (and stop the cluster) after this long (--real: default 20m)")
	f.StringVar(&dir, "dir", "", "directory for data and logs (default: a temporary one, removed afterwards)")
	f.BoolVar(&keep, "keep", false, "keep the temporary directory")
	f.BoolVar(&ui, "ui", false, "print the dashboard's URL (with a read token) and keep the cluster up after the workload until Ctrl-C or SIGTERM")
	f.BoolVar(&real, "real", false, "run real PyTorch jobs on CPU slots instead of emulated ones")
	f.BoolVar(&asJSON, "json", false, "with --real or --autoscale: print the result as one JSON object")
	f.BoolVar(&federated, "federation", false, "run three federated labs (lab-a, lab-b, lab-c: each one server and two agents of 2 GPUs by default, "+
		"its own CA) whose jobs arrive in turn, so that they lend each other idle GPUs and reclaim them; a table per lab at the end (docs/federation.md)")
	f.BoolVar(&autoscale, "autoscale", false, "start with one agent and let the servers' autoscaler add and remove agents")
	f.IntVar(&maxNodes, "max-nodes", 4, "with --autoscale: the most agents")
	f.Float64Var(&nodeCost, "node-cost", 3.912, "with --autoscale: price of an (emulated) node-hour")
	f.DurationVar(&bootDelay, "boot-delay", 2*time.Second, "with --autoscale: real time from asking for an agent to starting it")
	f.DurationVar(&scaleDownDelay, "scale-down-delay", 3*time.Second, "with --autoscale: real time the servers wait, once fewer agents are wanted, "+
		"before removing any (the servers' --scale-down-delay)")
	f.DurationVar(&settle, "settle", 90*time.Second, "with --autoscale: how long to wait, after the last job, for the cluster to shrink to one agent")
	f.IntVar(&realOpts.Slots, "cpu-slots", 2, "with --real: CPU slots per agent")
	f.StringVar(&realOpts.Python, "python", worker.Python, "with --real: the interpreter of the workers (it needs torch and sklearn)")
	f.IntVar(&augment, "augment", 16, "with --real: training copies of every digit (a longer epoch)")
	f.IntVar(&minEpochs, "min-epochs", 60, "with --real: epochs the CNNs train at least (the MLP: 4 times as many)")
	return cmd
}

// runDemo runs the emulated demo on the cluster of o through the demo
// workload, submitted over spread, within timeout; with ui it prints the
// first server's dashboard URL and keeps the cluster up after the
// workload until ctx ends (Ctrl-C or SIGTERM in pollux demo). Every
// process it started is stopped on every way out.
func runDemo(ctx context.Context, o launch.Options, cat testbed.Catalog, spread, timeout time.Duration, ui bool, out, errOut io.Writer) error {
	// The signals end everything; the timeout only the workload.
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fmt.Fprintf(out, "starting %d servers and %d agents of %d emulated GPUs on 127.0.0.1 (logs in %s)\n", o.Servers, o.Agents, o.GPUsPerAgent, o.Dir)
	c, err := launch.Start(runCtx, o)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(out, "mutual TLS and encrypted gossip on (CA, certificates and gossip key in %s)\n", c.TLS().Dir)
	fmt.Fprintf(out, "API tokens on (the cluster's admin token is in %s)\n", c.TokenFile())
	// Stop every process on every way out, Ctrl-C included.
	defer func() {
		fmt.Fprintln(out, "stopping the cluster")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(errOut, "pollux: demo:", err)
		}
	}()
	dashURL := ""
	if ui {
		tok, err := c.CreateToken(runCtx, "dashboard", "read")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		dashURL = launch.DashboardURL(c.Servers[0], tok.Secret)
		fmt.Fprintf(out, "dashboard: %s\n(%s)\n", dashURL, c.BrowserHint())
	}
	jobs := launch.DemoWorkload(spread)
	fmt.Fprintf(out, "submitting %d jobs over %v; time runs %gx\n", len(jobs), spread, o.TimeScale)
	res, err := c.Run(runCtx, cat, jobs, launch.RunOptions{TimeScale: o.TimeScale, Progress: out})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := launch.WriteResults(out, res); err != nil || !ui {
		return err
	}
	fmt.Fprintf(out, "the workload is done; the cluster stays up for the dashboard until Ctrl-C or SIGTERM\ndashboard: %s\n", dashURL)
	<-ctx.Done()
	return nil
}
