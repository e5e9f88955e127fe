package launch

import (
	"pollux/cluster/pki"

	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"pollux/testbed/chaos/history"
)

// ErrConfig is returned by Start for unusable options.
var ErrConfig = errors.New("launch: bad options")

// ErrCluster is returned when the cluster cannot be started, driven or
// stopped as asked (a process that is not ready, no leader, a worker that
// outlived its agent).
var ErrCluster = errors.New("launch: cluster")

// ErrNotRunning is returned when a process to signal or kill had
// already exited: the signal was not sent, and a kill did not happen.
var ErrNotRunning = errors.New("launch: not running")

// ErrSlowStop marks, in Stop's error, a server or agent that had to be
// killed because it was still running long after SIGTERM.
var ErrSlowStop = errors.New("launch: slow to stop")

// Network says how the processes reach each other.
type Network string

// The networks.
const (
	// Loopback: every process on 127.0.0.1, on ports found free.
	Loopback Network = "loopback"
	// Namespaces: each server and agent in a network namespace of its
	// own (package netns); needs root and iptables.
	Namespaces Network = "netns"
)

// Options describe the cluster to start.
type Options struct {
	// Exec is the program (and leading arguments) that runs `pollux`.
	Exec []string
	// Env is added to every process's environment (workers' too: the
	// agents pass these names on, with --pass-env).
	Env []string
	// Dir holds data directories (a server's Raft state, an agent's
	// fencing state: Dir/<id>), logs (<id>.log), each member's TMPDIR
	// (Dir/tmp/<id>, unless Env sets TMPDIR), the cluster's checkpoint
	// root (Dir/checkpoints), and with Observe the history and the worker
	// records. Required; made absolute.
	Dir string
	// Servers (default 3), Agents (default 2, or none with NoAgents) and
	// GPUsPerAgent (default 4).
	Servers, Agents, GPUsPerAgent int
	NoAgents                      bool
	// CPUSlots, if positive, makes every agent offer that many CPU slots
	// (`pollux agent --cpu-slots`) for real workers instead of emulated
	// GPUs; GPUsPerAgent is then CPUSlots (the scheduler counts slots as
	// GPUs). With at least as many cores as slots in all, the agents get
	// disjoint shares of the cores (AgentCores, Member.CPUs).
	CPUSlots int
	// AgentArgs are added to every agent's command line (e.g. the
	// --allow-command flags that allow the programs its workers run;
	// without any, the agents' default allows only the emulated worker
	// and the worker library's install directory). Without --run-as or
	// --run-as-range among them, an agent started as root gets
	// --run-as root: its workers run the test binary, which the uids
	// of the default range may not reach.
	AgentArgs []string
	// Interval is the scheduling interval (default 1 s); TimeScale the
	// emulated seconds per real second (default 100); RestartCost the
	// emulated start-up of a worker (default 30 s); Grace the SIGTERM to
	// SIGKILL delay for workers (default 5 s).
	Interval    time.Duration
	TimeScale   float64
	RestartCost time.Duration
	Grace       time.Duration
	// Racks is how many racks the agents are spread over, agent i in
	// rack r<i mod Racks> (default 2); with ServerRacks the servers too,
	// server i in rack r<i mod Racks>. GPUTypes, if set, gives agent i
	// GPUs of type GPUTypes[i mod len] (--gpu-type). Policy is the
	// servers' --policy (default: theirs).
	Racks       int
	ServerRacks bool
	GPUTypes    []string
	Policy      string
	// Retain is the servers' --retain: finished jobs are pruned that long
	// after they finished (0: kept).
	Retain time.Duration
	// LogLevel of the processes (default "info").
	LogLevel string
	// Network is Loopback (default) or Namespaces.
	Network Network
	// Observe turns on the independent observers: the client history
	// (Dir/history.jsonl, which Start opens with a run_begin event naming
	// Scenario, Seed and Planned) and the worker records
	// (Dir/records/<agent>/).
	Observe  bool
	Scenario string
	Seed     uint64
	Planned  []history.Planned
	// DataSize, if positive, mounts a tmpfs of that many bytes on each
	// server's data directory (root only), so that a disk can fill up.
	DataSize int64
	// Autoscale, if set, runs the servers with `--autoscale local`: they
	// add and remove agents (Dir/autoscale/<name>) as their decisions
	// say; Stop stops those too.
	Autoscale *Autoscale
	// Bundle, if set, is the cluster's TLS material (made beforehand, e.g.
	// pki.DevLabBundle for a lab of a federation, whose peers' federation
	// files name its CA); it must hold a certificate for every server
	// s<i> and agent a<i>. Loopback only.
	Bundle *pki.Bundle
	// ServerArgs are added to every server's command line (e.g. a lab's
	// --cluster and --federation flags).
	ServerArgs []string
	// CheckpointRoot, if set, is the cluster's checkpoint root instead of
	// Dir/checkpoints (labs of a federation share one: a borrower's jobs
	// checkpoint where the lender's agents may write).
	CheckpointRoot string
	// ConfigFiles starts every server and agent from a settings file
	// alone (`pollux server --config FILE`, see Cluster.ConfigFile)
	// instead of flags.
	ConfigFiles bool
	// Logger receives the launcher's progress (default: discarded).
	Logger *slog.Logger
}

// Autoscale are the servers' autoscaling settings (pollux server
// --min-nodes, --max-nodes, --boot-delay, --node-cost, --join-timeout);
// the agents they add have GPUsPerAgent GPUs.
type Autoscale struct {
	MinNodes, MaxNodes int
	BootDelay          time.Duration
	NodeCost           float64
	JoinTimeout        time.Duration
	// ScaleDownDelay is the servers' --scale-down-delay (0: none).
	ScaleDownDelay time.Duration
	// GPUType, if set, is the servers' --node-gpu-type: the agents they
	// add have GPUs of that type (the node template's), whatever
	// GPUTypes gives the launcher's own agents.
	GPUType string
}

func (o *Options) defaults() error {
	if len(o.Exec) == 0 || o.Dir == "" {
		return fmt.Errorf("%w: Exec and Dir are required", ErrConfig)
	}
	// The checkpoint root under Dir must be absolute for the servers.
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("%w: Dir %q: %w", ErrConfig, o.Dir, err)
	}
	o.Dir = dir
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Servers, 3)
	if !o.NoAgents {
		def(&o.Agents, 2)
	} else if o.Agents != 0 {
		return fmt.Errorf("%w: NoAgents with %d agents", ErrConfig, o.Agents)
	}
	if o.CPUSlots > 0 {
		if o.GPUsPerAgent != 0 && o.GPUsPerAgent != o.CPUSlots {
			return fmt.Errorf("%w: %d GPUs per agent and %d CPU slots", ErrConfig, o.GPUsPerAgent, o.CPUSlots)
		}
		o.GPUsPerAgent = o.CPUSlots // to the scheduler the slots are GPUs
	}
	def(&o.GPUsPerAgent, 4)
	def(&o.Racks, 2)
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	dur(&o.Interval, time.Second)
	dur(&o.RestartCost, 30*time.Second)
	dur(&o.Grace, 5*time.Second)
	if o.TimeScale == 0 {
		o.TimeScale = 100
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.Network == "" {
		o.Network = Loopback
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Scenario == "" {
		o.Scenario = "cluster"
	}
	switch {
	case o.Servers < 1 || o.Agents < 0 || o.GPUsPerAgent < 1 || o.Servers > 99 || o.Agents > 99 || o.CPUSlots < 0 || o.Racks < 1 || o.Racks > 99:
		return fmt.Errorf("%w: %d servers, %d agents of %d GPUs (%d CPU slots), %d racks", ErrConfig, o.Servers, o.Agents, o.GPUsPerAgent, o.CPUSlots, o.Racks)
	case !(o.TimeScale > 0) || o.Interval < 0 || o.Grace < 0 || o.RestartCost < 0 || o.DataSize < 0 || o.Retain < 0:
		return fmt.Errorf("%w: time scale %v, interval %v, grace %v, restart cost %v, data size %d, retain %v",
			ErrConfig, o.TimeScale, o.Interval, o.Grace, o.RestartCost, o.DataSize, o.Retain)
	case o.Autoscale != nil && (o.Network != Loopback || o.CPUSlots > 0):
		return fmt.Errorf("%w: autoscaling runs on loopback with emulated GPUs", ErrConfig)
	case o.Network != Loopback && o.Network != Namespaces:
		return fmt.Errorf("%w: network %q (loopback or netns)", ErrConfig, o.Network)
	}
	return nil
}
