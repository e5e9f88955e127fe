package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/node/worker"
	"pollux/internal/usage"
	"pollux/testbed/demo"
	"pollux/testbed/launch"
	"pollux/testbed/realdemo"
)

func init() { subcommands = append(subcommands, newDemoCmd) }

// demoFlags are the flags of `pollux demo`.
type demoFlags struct {
	servers, agents, gpus int
	scale                 float64
	spread, timeout       time.Duration
	dir                   string
	keep                  bool
	real, asJSON, ui      bool
	compare               bool
	lmTarget              float64
	autoscale, federated  bool
	maxNodes              int
	nodeCost              float64
	bootDelay, settle     time.Duration
	scaleDownDelay        time.Duration
	realOpts              realdemo.Options
	augment, minEpochs    int
}

func newDemoCmd() *cobra.Command {
	var d demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole cluster on this machine (servers, agents, emulated GPU workers) through a small mixed workload",
		Long:  longHelp("demo", false),
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runDemo(cmd, &d) },
	}
	f := cmd.Flags()
	f.IntVar(&d.servers, "servers", 3, "control-plane servers")
	f.IntVar(&d.agents, "agents", 4, "node agents (--real: default 2)")
	f.IntVar(&d.gpus, "gpus", 4, "emulated GPUs per agent")
	f.Float64Var(&d.scale, "time-scale", 300, "emulated seconds per real second (--real: the servers' clock rate for job ages, default 20)")
	f.DurationVar(&d.spread, "spread", 30*time.Second, "real time over which the jobs are submitted (--real: default 30s)")
	f.DurationVar(&d.timeout, "timeout", 5*time.Minute, "give up (and stop the cluster) after this long (--real: default 20m)")
	f.StringVar(&d.dir, "dir", "", "directory for data and logs (default: a temporary one, removed afterwards)")
	f.BoolVar(&d.keep, "keep", false, "keep the temporary directory")
	f.BoolVar(&d.ui, "ui", false, "print the dashboard's URL (with a read token) and keep the cluster up after the workload until Ctrl-C or SIGTERM")
	f.BoolVar(&d.real, "real", false, "run real PyTorch jobs on CPU slots instead of emulated ones")
	f.BoolVar(&d.compare, "compare", false, "with --real: run the workload and a language model twice, under pollux and under tiresias with user-sized jobs, and compare")
	f.BoolVar(&d.asJSON, "json", false, "with --real or --autoscale: print the result as one JSON object")
	f.BoolVar(&d.federated, "federation", false, "run three federated labs (lab-a, lab-b, lab-c: each one server and two agents of 2 GPUs by default, "+
		"its own CA) whose jobs arrive in turn, so that they lend each other idle GPUs and reclaim them; a table per lab at the end (docs/federation.md)")
	f.BoolVar(&d.autoscale, "autoscale", false, "start with one agent and let the servers' autoscaler add and remove agents")
	f.IntVar(&d.maxNodes, "max-nodes", 4, "with --autoscale: the most agents")
	f.Float64Var(&d.nodeCost, "node-cost", 3.912, "with --autoscale: price of an (emulated) node-hour")
	f.DurationVar(&d.bootDelay, "boot-delay", 2*time.Second, "with --autoscale: real time from asking for an agent to starting it")
	f.DurationVar(&d.scaleDownDelay, "scale-down-delay", 3*time.Second, "with --autoscale: real time the servers wait, once fewer agents are wanted, "+
		"before removing any (the servers' --scale-down-delay)")
	f.DurationVar(&d.settle, "settle", 90*time.Second, "with --autoscale: how long to wait, after the last job, for the cluster to shrink to one agent")
	f.IntVar(&d.realOpts.Slots, "cpu-slots", 0, "with --real: CPU slots per agent (0: 2, or with --compare one per core of the agent's own "+
		"share of this machine's cores, so that the slots are cores)")
	f.StringVar(&d.realOpts.Python, "python", worker.Python, "with --real: the interpreter of the workers (it needs torch and sklearn)")
	f.Float64Var(&d.lmTarget, "lm-target", realdemo.CompareLMTarget, "with --real --compare: the language model's target validation loss (nats per byte)")
	f.IntVar(&d.augment, "augment", 16, fmt.Sprintf("with --real: training copies of every digit (a longer epoch; with --compare the CNNs' default is %d, the MLP's 4 times as much)", realdemo.CompareAugment))
	f.IntVar(&d.minEpochs, "min-epochs", 60, "with --real, not --compare: epochs the CNNs train at least (the MLP: 4 times as many)")
	return cmd
}

// runDemo runs the demo the flags choose: --federation, --autoscale,
// --real, or the emulated one.
func runDemo(cmd *cobra.Command, d *demoFlags) error {
	f := cmd.Flags()
	if d.federated {
		if err := refuseFlags(cmd, "demo: --%s cannot be used with --federation", "real", "compare", "lm-target", "ui", "json", "autoscale", "cpu-slots", "python",
			"augment", "min-epochs", "max-nodes", "node-cost", "boot-delay", "scale-down-delay", "settle"); err != nil {
			return err
		}
		for _, def := range []struct {
			name string
			set  func()
		}{{"servers", func() { d.servers = 1 }}, {"agents", func() { d.agents = 2 }}, {"gpus", func() { d.gpus = 2 }},
			{"spread", func() { d.spread = 45 * time.Second }}, {"timeout", func() { d.timeout = 10 * time.Minute }}} {
			if !f.Changed(def.name) {
				def.set()
			}
		}
	}
	if d.autoscale {
		return runAutoscaleDemo(cmd, d)
	}
	if err := refuseFlags(cmd, "demo: --%s needs --autoscale", "max-nodes", "node-cost", "boot-delay", "scale-down-delay", "settle"); err != nil {
		return err
	}
	if d.real {
		return runRealDemo(cmd, d)
	}
	if err := refuseFlags(cmd, "demo: --%s needs --real (or --autoscale for --json)", "json", "compare", "lm-target", "cpu-slots", "python", "augment", "min-epochs"); err != nil {
		return err
	}
	if d.servers < 1 || d.agents < 1 || d.gpus < 1 || !(d.scale > 0) || d.spread < 0 || d.timeout <= 0 {
		return usage.Wrap(fmt.Errorf("demo: need at least one server, agent and GPU, a positive time scale and timeout"))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := demo.Options{Cluster: launch.Options{Dir: d.dir, Servers: d.servers, Agents: d.agents, GPUsPerAgent: d.gpus, TimeScale: d.scale},
		Keep: d.keep, Spread: d.spread, Timeout: d.timeout, UI: d.ui}
	if d.federated {
		return demo.Federation(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	return demo.Emulated(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// runAutoscaleDemo is `pollux demo --autoscale`.
func runAutoscaleDemo(cmd *cobra.Command, d *demoFlags) error {
	if err := refuseFlags(cmd, "demo: --%s cannot be used with --autoscale", "real", "compare", "lm-target", "ui", "cpu-slots", "python", "augment", "min-epochs",
		"agents"); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo.Autoscale(ctx, demo.AutoscaleOptions{Servers: d.servers, GPUs: d.gpus, MaxNodes: d.maxNodes, Scale: d.scale,
		Cost: d.nodeCost, Spread: d.spread, Timeout: d.timeout, Boot: d.bootDelay, ScaleDownDelay: d.scaleDownDelay, Settle: d.settle,
		Dir: d.dir, Keep: d.keep, JSON: d.asJSON}, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// runRealDemo is `pollux demo --real`: it fills in the defaults of the
// real demo and runs it until Ctrl-C or its timeout.
func runRealDemo(cmd *cobra.Command, d *demoFlags) error {
	f := cmd.Flags()
	if err := refuseFlags(cmd, "demo: --%s is for emulated jobs, not --real", "gpus", "ui"); err != nil {
		return err
	}
	o := d.realOpts
	o.Servers, o.Agents = d.servers, 2
	if f.Changed("time-scale") {
		o.TimeScale = d.scale
	}
	if f.Changed("agents") {
		o.Agents = d.agents
	}
	spread, timeout := d.spread, d.timeout
	if !f.Changed("spread") {
		spread = 30 * time.Second
	}
	if !f.Changed("timeout") {
		timeout = 20 * time.Minute
	}
	if o.Servers < 1 || o.Agents < 1 || o.Slots < 0 || d.augment < 1 || d.minEpochs < 1 || spread < 0 || timeout <= 0 {
		return usage.Wrap(errors.New("demo: --real needs at least one server, agent, CPU slot, augmentation and epoch, and a positive timeout"))
	}
	o.Dir, o.Jobs = d.dir, realdemo.Workload(spread/2, d.augment, d.minEpochs)
	if !d.compare && f.Changed("lm-target") {
		return usage.Wrap(errors.New("demo: --lm-target needs --compare"))
	}
	if d.compare {
		if !(d.lmTarget > 0) {
			return usage.Wrap(fmt.Errorf("demo: --lm-target %v: want a positive validation loss", d.lmTarget))
		}
		if f.Changed("min-epochs") {
			return usage.Wrap(errors.New("demo: --min-epochs cannot be used with --compare: its jobs train until their targets"))
		}
		augment := realdemo.CompareAugment
		if f.Changed("augment") {
			augment = d.augment
		}
		o.Jobs = realdemo.CompareWorkload(spread/3, augment, d.lmTarget)
		if !f.Changed("timeout") {
			timeout = 90 * time.Minute
		}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if d.compare {
		return demo.Compare(ctx, o, d.keep, d.asJSON, cmd.OutOrStdout(), cmd.ErrOrStderr())
	}
	return demo.Real(ctx, o, d.keep, d.asJSON, cmd.OutOrStdout(), cmd.ErrOrStderr())
}
