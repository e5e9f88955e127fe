package main

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/agent"
	"pollux/actors/node"
	"pollux/actors/node/workerlog"
	"pollux/internal/flagfile"
	"pollux/internal/usage"
)

func init() { subcommands = append(subcommands, newAgentCmd) }

// agentFlags are the flags of `pollux agent`: all but the log level set
// the Config directly.
type agentFlags struct {
	cfg      agent.Config
	logLevel string
	conf     flagfile.Options
}

func newAgentCmd() *cobra.Command { return agentCmd(new(agentFlags)) }

// agentCmd is `pollux agent`, setting o.
func agentCmd(o *agentFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent of one GPU machine: joins the cluster and runs the workers it is assigned",
		Long: "Runs one node agent: a gossip member (role agent) advertising its GPUs and rack, and the node " +
			"actor that starts, stops and watches the machine's workers. GPUs are counted with nvidia-smi " +
			"unless --gpus N emulates N of them, or --cpu-slots N offers N CPU slots instead (machines without " +
			"accelerators: each slot's worker is pinned to its share of the cores). --topology rack=R[,zone=Z...] declares where the " +
			"machine sits (innermost level first, the cluster's levels in order; nothing: the default rack) and --gpu-type T the type of its " +
			"GPUs (say a100 or t4; the allocator gives a job GPUs of one type at a time); a topology that does not fit the cluster's levels " +
			"is refused when the agent joins (exit status 2). It prints one JSON line with its addresses on stdout when " +
			"ready, and on SIGTERM or SIGINT stops its workers (SIGTERM, SIGKILL after --grace) and leaves. Its actor " +
			"port accepts only server certificates of --ca, its workers report to it over TLS (they get the CA in " +
			"POLLUX_REPORT_CA) and gossip is encrypted with --gossip-key (docs/security.md); --insecure runs plaintext. " +
			"It runs only commands of its allow-list (--allow-command), as --run-as, with only the protocol's " +
			"POLLUX_* variables and those named by --pass-env, and only with checkpoint directories below the " +
			"cluster's checkpoint root. Each worker's stdout and stderr go to a log file of its own under --log-dir, " +
			"capped by --worker-log-max, which `pollux logs` reads (docs/logs.md). --config FILE reads the flags from a YAML file (each key a flag's name; flags on the " +
			"command line win) and --print-config prints the effective settings (docs/deploy.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fromFile := o.conf.File != "" && !cmd.Flags().Changed("allow-command")
			if printed, err := o.conf.Load(cmd.Flags(), cmd.OutOrStdout()); err != nil || printed {
				return err
			}
			if fromFile {
				o.cfg.ReloadAllowCommands = allowFromFile(o.conf.File)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			c, err := agentConfig(cmd, *o)
			if err != nil {
				return err
			}
			return agent.Run(ctx, c)
		},
	}
	host, _ := os.Hostname()
	c, f := &o.cfg, cmd.Flags()
	f.StringVar(&c.Name, "name", host, "unique member name of this machine")
	f.StringVar(&c.Bind, "bind", "127.0.0.1", "address to listen on (gossip, actors, worker reports)")
	f.IntVar(&c.GossipPort, "gossip-port", 0, "gossip port (0: any free port)")
	f.IntVar(&c.ActorPort, "actor-port", 0, "actor port (0: any free port)")
	f.StringSliceVar(&c.Join, "join", nil, "gossip addresses (host:port) of cluster members to join")
	f.IntVar(&c.GPUs, "gpus", 0, "emulate this many GPUs (0: count them with nvidia-smi)")
	f.IntVar(&c.CPUSlots, "cpu-slots", 0, "offer this many CPU slots as GPUs, each pinned to its share of this machine's cores (POLLUX_CPUS)")
	f.StringVar(&c.CPUs, "cpus", "", "with --cpu-slots: the cores the slots share, a cpu-list such as 0-3,6 within this process's affinity (empty: all)")
	f.StringVar(&c.Topology, "topology", "", "where this machine sits: level=domain pairs, innermost first, e.g. rack=r3,zone=z1 (empty: the default rack)")
	f.StringVar(&c.Rack, "rack", "", "this machine's rack: short for --topology rack=R on a cluster whose only level is the rack")
	f.StringVar(&c.GPUType, "gpu-type", "", "the type of this machine's GPUs, lower-case letters, digits, '-', '_', '.' (e.g. a100, t4; empty: untyped)")
	f.DurationVar(&c.Grace, "grace", node.DefaultGrace, "time between SIGTERM and SIGKILL when stopping a worker")
	f.BoolVar(&c.FastGossip, "fast-gossip", false, "sub-second failure detection (loopback and test clusters)")
	f.Float64Var(&c.TimeScale, "time-scale", 1, "time scale of emulated workers (simulated seconds per real second)")
	f.DurationVar(&c.RestartCost, "restart-cost", 30*time.Second, "simulated start-up time of emulated workers")
	f.StringVar(&c.DataDir, "data-dir", "", "directory of the agent's fencing state (the newest term, generation and job "+
		"incarnations it accepted), so a restarted agent never reruns an old incarnation; empty: kept in memory only")
	f.StringVar(&c.LogDir, "log-dir", "", "directory of the workers' logs, one file per job, incarnation and rank (0700; "+
		"empty: logs under --data-dir, or a temporary directory removed when the agent stops)")
	f.Int64Var(&c.LogMaxBytes, "worker-log-max", workerlog.DefaultMaxBytes, "bytes of disk each worker's log may take: "+
		"beyond half of it the older half is deleted (pollux logs then says how much was dropped)")
	f.Int64Var(&c.LogMaxTotal, "worker-log-total", workerlog.DefaultMaxTotal, "bytes of disk all the workers' logs may take: "+
		"logs are kept until the cluster prunes their job; past this, starting a worker deletes the least recently written first")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringSliceVar(&c.WorkerExec, "worker-exec", nil, "program (and leading arguments) that runs `pollux worker` (default: this binary)")
	_ = f.MarkHidden("worker-exec")
	f.StringArrayVar(&c.AllowCommands, "allow-command", nil, "a command workers may run (repeatable; replaces the default "+
		strings.Join(quoteAll(node.DefaultAllowCommands), " and ")+"): words separated by spaces, each a glob "+
		"(* and ? never match a '/') matched against the argument at its position, a last word ** allowing any "+
		"further arguments; emulated:GLOB allows the emulated applications it matches")
	f.StringVar(&c.RunAs, "run-as", "", "one user (name or uid) every job's workers run as, with its groups, and who owns "+
		"their checkpoint directories: a single-tenant agent (needs root; empty: see --run-as-range)")
	f.StringVar(&c.RunAsRange, "run-as-range", "", "FIRST-LAST: each job's workers run as a uid of this range of their own "+
		"while the job runs here, which owns its checkpoint directory (0700) and report token file (needs root; default "+
		node.DefaultUIDRange.String()+" for an agent running as root without --run-as, else the agent's own user)")
	f.StringArrayVar(&c.PassEnv, "pass-env", nil, "name of a variable of the agent's environment to pass to workers "+
		"(repeatable; workers get only the protocol's variables and these)")
	securityFlags(f, &c.Security)
	o.conf.Register(f)
	return cmd
}

// agentConfig maps the flags that need it to the agent's Config.
func agentConfig(cmd *cobra.Command, o agentFlags) (agent.Config, error) {
	c := o.cfg
	var err error
	if c.Logger, c.LibLogger, err = loggers(cmd.ErrOrStderr(), o.logLevel); err != nil {
		return c, usage.Wrap(err)
	}
	if !cmd.Flags().Changed("allow-command") {
		c.AllowCommands = nil // the default
	}
	c.OnReady = func(r agent.Ready) { printReady(cmd.OutOrStdout(), r) }
	return c, nil
}

// allowFromFile re-reads the allow-list from the agent's settings file
// (on SIGHUP): nil, the default, when the file names none.
func allowFromFile(file string) func() ([]string, error) {
	return func() ([]string, error) {
		fs := newAgentCmd().Flags()
		if err := flagfile.ApplyFile(fs, file); err != nil {
			return nil, err
		}
		if !fs.Changed("allow-command") {
			return nil, nil
		}
		return fs.GetStringArray("allow-command")
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}
