package server

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

	"pollux/actors/allocator"
	"pollux/cluster/provider"
	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/optimizer/topology"
)

// Autoscale is the autoscaling configuration of a server
// (docs/autoscaling.md); the comments name the flags.
type Autoscale struct {
	// Provider is local (start and stop `pollux agent` processes on
	// this machine) or exec (run commands); "" turns autoscaling off
	// (--autoscale).
	Provider string
	// MinNodes and MaxNodes bound the cluster's size; NodeGPUs and
	// NodeGPUType are the node template (--node-gpus, --node-gpu-type);
	// NodeCost the price of a node-hour.
	MinNodes, MaxNodes, NodeGPUs int
	NodeGPUType                  string
	NodeCost, LowUtil, HighUtil  float64
	// JoinTimeout gives up a node that has not joined; ScaleDownDelay is
	// how long the desired size must stay below the cluster's before
	// machines are drained.
	JoinTimeout, ScaleDownDelay time.Duration
	// The local provider's settings: BootDelay before an agent starts,
	// Dir of its agents (default: autoscale beside the data directory),
	// CAKey to certify them, AgentExec the program that runs `pollux`
	// (default: this binary) and AgentArgs added to their command lines.
	BootDelay            time.Duration
	Dir, CAKey           string
	AgentExec, AgentArgs []string
	// The exec provider's settings (--scale-up-command ...).
	UpCommand, DownCommand  string
	CommandTimeout, Backoff time.Duration
	Attempts                int
}

// check refuses bad settings at start-up, before anything starts.
func (o *Autoscale) check() error {
	if o.Provider == "" {
		return nil
	}
	switch {
	case o.Provider != "local" && o.Provider != "exec":
		return fmt.Errorf("server: --autoscale %q, want local or exec", o.Provider)
	case o.MinNodes < 0 || o.MaxNodes < 1:
		return fmt.Errorf("server: --min-nodes %d and --max-nodes %d, want at least 0 and 1", o.MinNodes, o.MaxNodes)
	case o.MinNodes > o.MaxNodes:
		return fmt.Errorf("server: --min-nodes %d is above --max-nodes %d", o.MinNodes, o.MaxNodes)
	case !(o.NodeCost >= 0) || math.IsInf(o.NodeCost, 0):
		return fmt.Errorf("server: --node-cost %v, want a finite price of at least 0", o.NodeCost)
	case o.NodeGPUs < 1:
		return fmt.Errorf("server: --node-gpus %d, want at least 1", o.NodeGPUs)
	case !(o.LowUtil > 0 && o.LowUtil <= o.HighUtil && o.HighUtil <= 1):
		return fmt.Errorf("server: --low-util %v and --high-util %v, want 0 < low <= high <= 1", o.LowUtil, o.HighUtil)
	case o.JoinTimeout <= 0 || o.BootDelay < 0:
		return fmt.Errorf("server: --join-timeout %v must be positive, --boot-delay %v not negative", o.JoinTimeout, o.BootDelay)
	case o.ScaleDownDelay < 0:
		return fmt.Errorf("server: --scale-down-delay %v, want at least 0", o.ScaleDownDelay)
	}
	if o.NodeGPUType != "" {
		if err := topology.CheckName("GPU type", o.NodeGPUType); err != nil {
			return fmt.Errorf("server: --node-gpu-type: %w", err)
		}
		for _, a := range o.AgentArgs {
			if a == "--gpu-type" || strings.HasPrefix(a, "--gpu-type=") {
				return fmt.Errorf("server: --autoscale-agent-arg %s and --node-gpu-type both give the agents' GPU type: give --node-gpu-type alone", a)
			}
		}
	}
	if o.Provider == "exec" {
		if len(strings.Fields(o.UpCommand)) == 0 || len(strings.Fields(o.DownCommand)) == 0 {
			return errors.New("server: --autoscale exec needs --scale-up-command and --scale-down-command")
		}
		if o.CommandTimeout <= 0 || o.Attempts < 1 || o.Backoff < 0 {
			return fmt.Errorf("server: --scale-command-timeout %v, --scale-command-attempts %d, --scale-command-backoff %v", o.CommandTimeout, o.Attempts, o.Backoff)
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
func (o *Autoscale) build(e scaleEnv) (*allocator.Autoscale, error) {
	var p provider.Provider
	switch o.Provider {
	case "":
		return nil, nil
	case "local":
		l, err := o.local(e)
		if err != nil {
			return nil, err
		}
		p = l
	case "exec":
		x, err := provider.NewExec(provider.Exec{AddCommand: strings.Fields(o.UpCommand), RemoveCommand: strings.Fields(o.DownCommand),
			Timeout: o.CommandTimeout, Attempts: o.Attempts, Backoff: o.Backoff, Logger: e.logger})
		if err != nil {
			return nil, usage.Errorf("server: --autoscale exec: %w", err)
		}
		p = x
	}
	return &allocator.Autoscale{Settings: optimizer.Autoscale{Template: optimizer.Node{GPUs: o.NodeGPUs, Type: o.NodeGPUType},
		MinNodes: o.MinNodes, MaxNodes: o.MaxNodes, LowUtil: o.LowUtil, HighUtil: o.HighUtil}, Provider: p, NodeCost: o.NodeCost,
		JoinTimeout: o.JoinTimeout, ScaleDownDelay: o.ScaleDownDelay}, nil
}

// local is the local provider: agents started on this machine, joining
// the server's gossip with its CA and keys.
func (o *Autoscale) local(e scaleEnv) (*provider.Local, error) {
	prog := o.AgentExec
	if len(prog) == 0 {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		prog = []string{self}
	}
	dir := o.Dir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(e.dataDir)), "autoscale")
	}
	args := []string{"--time-scale", strconv.FormatFloat(e.timeScale, 'g', -1, 64)}
	if e.fast {
		args = append(args, "--fast-gossip")
	}
	l, err := provider.NewLocal(provider.Local{Dir: dir, Exec: prog, GPUs: o.NodeGPUs, GPUType: o.NodeGPUType, Join: []string{e.gossip},
		CACert: e.ca, CAKey: o.CAKey, GossipKey: e.gossipKey, Insecure: e.insecure, Args: append(args, o.AgentArgs...),
		BootDelay: o.BootDelay, Logger: e.logger})
	if err != nil {
		return nil, usage.Errorf("server: --autoscale local: %w", err)
	}
	return l, nil
}
