package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"pollux/actors/allocator"
	"pollux/cluster/provider"
	"pollux/optimizer"
	"pollux/optimizer/topology"
)

// scaleOpts are `pollux server`'s autoscaling flags (issue 19).
type scaleOpts struct {
	provider                 string
	minNodes, maxNodes, gpus int
	gpuType                  string
	cost, lowUtil, highUtil  float64
	bootDelay, joinTimeout   time.Duration
	scaleDownDelay           time.Duration
	dir, caKey               string
	agentArgs, agentExec     []string
	upCommand, downCommand   string
	commandTimeout, backoff  time.Duration
	attempts                 int
}

func (o *scaleOpts) flags(f *pflag.FlagSet) {
	f.StringVar(&o.provider, "autoscale", "", "size the cluster with the Pollux autoscaler through a provider: local (start and stop `pollux agent` "+
		"processes on this machine) or exec (run --scale-up-command / --scale-down-command); empty: off (docs/autoscaling.md)")
	f.IntVar(&o.minNodes, "min-nodes", 1, "with --autoscale: the fewest nodes")
	f.IntVar(&o.maxNodes, "max-nodes", 16, "with --autoscale: the most nodes")
	f.IntVar(&o.gpus, "node-gpus", 4, "with --autoscale: GPUs of a node the autoscaler adds (the node template)")
	f.StringVar(&o.gpuType, "node-gpu-type", "", "with --autoscale: GPU type of a node the autoscaler adds (the local provider starts its agents "+
		"with --gpu-type T); needed to autoscale a cluster of several GPU types (empty: untyped nodes)")
	f.Float64Var(&o.cost, "node-cost", 3.912, "with --autoscale: price of a node-hour (logged with every decision)")
	f.Float64Var(&o.lowUtil, "low-util", optimizer.DefaultLowUtil, "with --autoscale: the utility band's low end")
	f.Float64Var(&o.highUtil, "high-util", optimizer.DefaultHighUtil, "with --autoscale: the utility band's high end")
	f.DurationVar(&o.joinTimeout, "join-timeout", 5*time.Minute, "with --autoscale: a node asked for that has not joined after this long is given up (removed)")
	f.DurationVar(&o.scaleDownDelay, "scale-down-delay", 10*time.Minute, "with --autoscale: how long the desired size must stay below the "+
		"cluster's before machines are drained (then down to the largest size wanted meanwhile; 0: at once, the artifact's rule alone)")
	f.DurationVar(&o.bootDelay, "boot-delay", 0, "with --autoscale local: wait this long before starting an agent (a cloud machine's boot)")
	f.StringVar(&o.dir, "autoscale-dir", "", "with --autoscale local: directory of the agents' certificates, data, logs and pids "+
		"(shared by every server of the cluster; default: autoscale beside --data-dir)")
	f.StringVar(&o.caKey, "ca-key", "", "with --autoscale local: the cluster CA's key, to certify every agent it starts (with --ca)")
	f.StringSliceVar(&o.agentExec, "autoscale-exec", nil, "with --autoscale local: program (and leading arguments) that runs `pollux` "+
		"for the agents it starts (default: this binary)")
	f.StringArrayVar(&o.agentArgs, "autoscale-agent-arg", nil, "with --autoscale local: an argument added to every agent's command line (repeatable)")
	f.StringVar(&o.upCommand, "scale-up-command", "", "with --autoscale exec: command (words split on spaces) run with a node's name to add it")
	f.StringVar(&o.downCommand, "scale-down-command", "", "with --autoscale exec: command run with a node's name to remove it")
	f.DurationVar(&o.commandTimeout, "scale-command-timeout", 5*time.Minute, "with --autoscale exec: one attempt of a command is killed after this long")
	f.IntVar(&o.attempts, "scale-command-attempts", 3, "with --autoscale exec: attempts of a command that fails or times out")
	f.DurationVar(&o.backoff, "scale-command-backoff", 2*time.Second, "with --autoscale exec: wait before the second attempt, doubling")
}

// scaleFlags are the flags that need --autoscale.
var scaleFlags = []string{"min-nodes", "max-nodes", "node-gpus", "node-gpu-type", "node-cost", "low-util", "high-util", "join-timeout", "scale-down-delay", "boot-delay",
	"autoscale-dir", "ca-key", "autoscale-exec", "autoscale-agent-arg", "scale-up-command", "scale-down-command", "scale-command-timeout",
	"scale-command-attempts", "scale-command-backoff"}

// check refuses bad settings at start-up, before anything starts.
func (o *scaleOpts) check(f *pflag.FlagSet) error {
	if o.provider == "" {
		for _, name := range scaleFlags {
			if f.Changed(name) {
				return fmt.Errorf("server: --%s needs --autoscale", name)
			}
		}
		return nil
	}
	switch {
	case o.provider != "local" && o.provider != "exec":
		return fmt.Errorf("server: --autoscale %q, want local or exec", o.provider)
	case o.minNodes < 0 || o.maxNodes < 1:
		return fmt.Errorf("server: --min-nodes %d and --max-nodes %d, want at least 0 and 1", o.minNodes, o.maxNodes)
	case o.minNodes > o.maxNodes:
		return fmt.Errorf("server: --min-nodes %d is above --max-nodes %d", o.minNodes, o.maxNodes)
	case !(o.cost >= 0) || math.IsInf(o.cost, 0):
		return fmt.Errorf("server: --node-cost %v, want a finite price of at least 0", o.cost)
	case o.gpus < 1:
		return fmt.Errorf("server: --node-gpus %d, want at least 1", o.gpus)
	case !(o.lowUtil > 0 && o.lowUtil <= o.highUtil && o.highUtil <= 1):
		return fmt.Errorf("server: --low-util %v and --high-util %v, want 0 < low <= high <= 1", o.lowUtil, o.highUtil)
	case o.joinTimeout <= 0 || o.bootDelay < 0:
		return fmt.Errorf("server: --join-timeout %v must be positive, --boot-delay %v not negative", o.joinTimeout, o.bootDelay)
	case o.scaleDownDelay < 0:
		return fmt.Errorf("server: --scale-down-delay %v, want at least 0", o.scaleDownDelay)
	}
	if o.gpuType != "" {
		if err := topology.CheckName("GPU type", o.gpuType); err != nil {
			return fmt.Errorf("server: --node-gpu-type: %w", err)
		}
		for _, a := range o.agentArgs {
			if a == "--gpu-type" || strings.HasPrefix(a, "--gpu-type=") {
				return fmt.Errorf("server: --autoscale-agent-arg %s and --node-gpu-type both give the agents' GPU type: give --node-gpu-type alone", a)
			}
		}
	}
	local := []string{"boot-delay", "autoscale-dir", "ca-key", "autoscale-exec", "autoscale-agent-arg"}
	exec := []string{"scale-up-command", "scale-down-command", "scale-command-timeout", "scale-command-attempts", "scale-command-backoff"}
	other := exec
	if o.provider == "exec" {
		other = local
	}
	for _, name := range other {
		if f.Changed(name) {
			return fmt.Errorf("server: --%s is not for --autoscale %s", name, o.provider)
		}
	}
	if o.provider == "exec" {
		if len(strings.Fields(o.upCommand)) == 0 || len(strings.Fields(o.downCommand)) == 0 {
			return errors.New("server: --autoscale exec needs --scale-up-command and --scale-down-command")
		}
		if o.commandTimeout <= 0 || o.attempts < 1 || o.backoff < 0 {
			return fmt.Errorf("server: --scale-command-timeout %v, --scale-command-attempts %d, --scale-command-backoff %v", o.commandTimeout, o.attempts, o.backoff)
		}
	}
	return nil
}

// scaleEnv is what the local provider takes from the server.
type scaleEnv struct {
	dataDir, gossip string
	ca, gossipKey   string
	insecure, fast  bool
	timeScale       float64
	logger          *slog.Logger
}

// build makes the allocator's autoscaling (nil when off).
func (o *scaleOpts) build(e scaleEnv) (*allocator.Autoscale, error) {
	if o.provider == "" {
		return nil, nil
	}
	var p provider.Provider
	switch o.provider {
	case "local":
		prog := o.agentExec
		if len(prog) == 0 {
			self, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("server: %w", err)
			}
			prog = []string{self}
		}
		dir := o.dir
		if dir == "" {
			dir = filepath.Join(filepath.Dir(filepath.Clean(e.dataDir)), "autoscale")
		}
		args := []string{"--time-scale", strconv.FormatFloat(e.timeScale, 'g', -1, 64)}
		if e.fast {
			args = append(args, "--fast-gossip")
		}
		l, err := provider.NewLocal(provider.Local{Dir: dir, Exec: prog, GPUs: o.gpus, GPUType: o.gpuType, Join: []string{e.gossip},
			CACert: e.ca, CAKey: o.caKey, GossipKey: e.gossipKey, Insecure: e.insecure, Args: append(args, o.agentArgs...),
			BootDelay: o.bootDelay, Logger: e.logger})
		if err != nil {
			return nil, badInput(fmt.Errorf("server: --autoscale local: %w", err))
		}
		p = l
	case "exec":
		x, err := provider.NewExec(provider.Exec{AddCommand: strings.Fields(o.upCommand), RemoveCommand: strings.Fields(o.downCommand),
			Timeout: o.commandTimeout, Attempts: o.attempts, Backoff: o.backoff, Logger: e.logger})
		if err != nil {
			return nil, badInput(fmt.Errorf("server: --autoscale exec: %w", err))
		}
		p = x
	}
	return &allocator.Autoscale{Settings: optimizer.Autoscale{Template: optimizer.Node{GPUs: o.gpus, Type: o.gpuType}, MinNodes: o.minNodes, MaxNodes: o.maxNodes,
		LowUtil: o.lowUtil, HighUtil: o.highUtil}, Provider: p, NodeCost: o.cost, JoinTimeout: o.joinTimeout, ScaleDownDelay: o.scaleDownDelay}, nil
}
