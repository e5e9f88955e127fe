package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"pollux/actors/server"
	"pollux/optimizer"
)

// autoscaleFlags are `pollux server`'s autoscaling flags (docs/autoscaling.md).
func autoscaleFlags(f *pflag.FlagSet, o *server.Autoscale) {
	f.StringVar(&o.Provider, "autoscale", "", "size the cluster with the Pollux autoscaler through a provider: local (start and stop `pollux agent` "+
		"processes on this machine) or exec (run --scale-up-command / --scale-down-command); empty: off (docs/autoscaling.md)")
	f.IntVar(&o.MinNodes, "min-nodes", 1, "with --autoscale: the fewest nodes")
	f.IntVar(&o.MaxNodes, "max-nodes", 16, "with --autoscale: the most nodes")
	f.IntVar(&o.NodeGPUs, "node-gpus", 4, "with --autoscale: GPUs of a node the autoscaler adds (the node template)")
	f.StringVar(&o.NodeGPUType, "node-gpu-type", "", "with --autoscale: GPU type of a node the autoscaler adds (the local provider starts its agents "+
		"with --gpu-type T); needed to autoscale a cluster of several GPU types (empty: untyped nodes)")
	f.Float64Var(&o.NodeCost, "node-cost", 3.912, "with --autoscale: price of a node-hour (logged with every decision)")
	f.Float64Var(&o.LowUtil, "low-util", optimizer.DefaultLowUtil, "with --autoscale: the utility band's low end")
	f.Float64Var(&o.HighUtil, "high-util", optimizer.DefaultHighUtil, "with --autoscale: the utility band's high end")
	f.DurationVar(&o.JoinTimeout, "join-timeout", 5*time.Minute, "with --autoscale: a node asked for that has not joined after this long is given up (removed)")
	f.DurationVar(&o.ScaleDownDelay, "scale-down-delay", 10*time.Minute, "with --autoscale: how long the desired size must stay below the "+
		"cluster's before machines are drained (then down to the largest size wanted meanwhile; 0: at once, the artifact's rule alone)")
	f.DurationVar(&o.BootDelay, "boot-delay", 0, "with --autoscale local: wait this long before starting an agent (a cloud machine's boot)")
	f.StringVar(&o.Dir, "autoscale-dir", "", "with --autoscale local: directory of the agents' certificates, data, logs and pids "+
		"(shared by every server of the cluster; default: autoscale beside --data-dir)")
	f.StringVar(&o.CAKey, "ca-key", "", "with --autoscale local: the cluster CA's key, to certify every agent it starts (with --ca)")
	f.StringSliceVar(&o.AgentExec, "autoscale-exec", nil, "with --autoscale local: program (and leading arguments) that runs `pollux` "+
		"for the agents it starts (default: this binary)")
	f.StringArrayVar(&o.AgentArgs, "autoscale-agent-arg", nil, "with --autoscale local: an argument added to every agent's command line (repeatable)")
	f.StringVar(&o.UpCommand, "scale-up-command", "", "with --autoscale exec: command (words split on spaces) run with a node's name to add it")
	f.StringVar(&o.DownCommand, "scale-down-command", "", "with --autoscale exec: command run with a node's name to remove it")
	f.DurationVar(&o.CommandTimeout, "scale-command-timeout", 5*time.Minute, "with --autoscale exec: one attempt of a command is killed after this long")
	f.IntVar(&o.Attempts, "scale-command-attempts", 3, "with --autoscale exec: attempts of a command that fails or times out")
	f.DurationVar(&o.Backoff, "scale-command-backoff", 2*time.Second, "with --autoscale exec: wait before the second attempt, doubling")
}

// The flags of autoscaling, of its local provider and of its exec
// provider.
var (
	scaleFlags = []string{"min-nodes", "max-nodes", "node-gpus", "node-gpu-type", "node-cost", "low-util", "high-util", "join-timeout",
		"scale-down-delay", "boot-delay", "autoscale-dir", "ca-key", "autoscale-exec", "autoscale-agent-arg", "scale-up-command",
		"scale-down-command", "scale-command-timeout", "scale-command-attempts", "scale-command-backoff"}
	scaleLocalFlags = []string{"boot-delay", "autoscale-dir", "ca-key", "autoscale-exec", "autoscale-agent-arg"}
	scaleExecFlags  = []string{"scale-up-command", "scale-down-command", "scale-command-timeout", "scale-command-attempts", "scale-command-backoff"}
)

// checkAutoscaleFlags refuses an autoscaling flag given without
// --autoscale, or one of the other provider's (the values are checked by
// server.Run).
func checkAutoscaleFlags(f *pflag.FlagSet, provider string) error {
	other := map[string][]string{"": scaleFlags, "local": scaleExecFlags, "exec": scaleLocalFlags}[provider]
	for _, name := range other {
		switch {
		case !f.Changed(name):
		case provider == "":
			return fmt.Errorf("server: --%s needs --autoscale", name)
		default:
			return fmt.Errorf("server: --%s is not for --autoscale %s", name, provider)
		}
	}
	return nil
}
