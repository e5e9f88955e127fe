package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/allocator"
	"pollux/actors/jobspec"
	"pollux/actors/server"
	"pollux/internal/flagfile"
	"pollux/internal/usage"
	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
	"pollux/testbed"
	"pollux/testbed/builtin"
)

func init() { subcommands = append(subcommands, newServerCmd) }

// serverFlags are the flags of `pollux server`: most set the Config
// directly, the rest are mapped to it by serverConfig.
type serverFlags struct {
	cfg                             server.Config
	peers, levels, policy, logLevel string
	conf                            flagfile.Options
}

func newServerCmd() *cobra.Command { return serverCmd(new(serverFlags)) }

// serverCmd is `pollux server`, setting o.
func serverCmd(o *serverFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one control-plane server: Raft member, gossip member, allocator and HTTP API",
		Long: "Runs one control-plane server (run 3 or 5): a Raft member of the replicated scheduler state " +
			"(data in --data-dir), a gossip member, the allocator actor (active on the Raft leader only, every " +
			"--interval), a job host running the job actors placed on it, and the HTTP JSON API on --http (every " +
			"server answers; followers forward writes to the leader over the Raft port), with the web dashboard at /ui/ " +
			"(docs/dashboard.md). Every channel runs over " +
			"mutual TLS with the certificates of --ca, --cert and --key and gossip is encrypted with --gossip-key " +
			"(docs/security.md); --insecure runs plaintext, for development. --peers lists every server as " +
			"id=raftaddr=httpaddr; --bootstrap forms the cluster from it (safe to repeat on restart) and sets the " +
			"cluster's checkpoint root (--checkpoint-root, which can never change afterwards). A server added later " +
			"starts without --bootstrap (and --peers), joins the gossip with --join, and is made a voter with " +
			"`pollux operator raft add-server`. --topology-levels names the cluster's topology levels (set at bootstrap, like " +
			"the checkpoint root), --topology where this server sits (a server warns when a majority of the voters share a rack), " +
			"--policy the allocation policy (auto: pollux on one GPU type, pollux-het on several; --cross-rack-ratio was removed: a policy prices racks only by what jobs fitted). --cluster names the cluster (once in its life) " +
			"and --federation with --federation-addr makes it a lab of a federation that lends and borrows GPUs (docs/federation.md). " +
			"Prints one JSON line with its addresses on stdout when ready. --config FILE reads the flags from a YAML file " +
			"(each key a flag's name; flags on the command line win) and --print-config prints the effective settings (docs/deploy.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printed, err := o.conf.Load(cmd.Flags(), cmd.OutOrStdout()); err != nil || printed {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			c, err := serverConfig(cmd, *o)
			if err != nil {
				return err
			}
			return server.Run(ctx, c)
		},
	}
	c, f := &o.cfg, cmd.Flags()
	f.StringVar(&c.ID, "id", "", "server id, unique in the cluster (required)")
	f.StringVar(&c.DataDir, "data-dir", "", "directory of the Raft log and snapshots (required)")
	f.StringVar(&c.Bind, "bind", "127.0.0.1", "address for the gossip and actor listeners")
	f.StringVar(&c.RaftAddr, "raft", "127.0.0.1:7000", "Raft TCP address (host:port)")
	f.StringVar(&c.HTTPAddr, "http", "127.0.0.1:8080", "HTTP API address (host:port)")
	f.IntVar(&c.GossipPort, "gossip-port", 0, "gossip port (0: any free port)")
	f.IntVar(&c.ActorPort, "actor-port", 0, "actor port (0: any free port)")
	f.StringVar(&o.peers, "peers", "", "every server as id=raftaddr=httpaddr, comma-separated (required with --bootstrap)")
	f.BoolVar(&c.Bootstrap, "bootstrap", false, "form the cluster from --peers (no effect on a server with state)")
	f.StringSliceVar(&c.Join, "join", nil, "gossip addresses (host:port) of members to join")
	f.BoolVar(&c.FastGossip, "fast-gossip", false, "sub-second failure detection (loopback and test clusters)")
	f.DurationVar(&c.Interval, "interval", allocator.DefaultInterval, "scheduling interval")
	f.DurationVar(&c.RaftElection, "raft-election-timeout", 0, "Raft's heartbeat and election timeout, the leader lease half of it "+
		"(0: 200ms; longer rides out a loaded machine's late heartbeats, at the cost of a slower failover)")
	f.DurationVar(&c.NodeGrace, "node-grace", 3*time.Second, "how long an agent must be missing from the membership before it is marked dead")
	f.DurationVar(&c.AgentLease, "agent-lease", allocator.DefaultLease, "the agents' lease: the leader renews it every quarter of it; an agent "+
		"that goes that long without a renewal pauses its workers, and no job restarts elsewhere until its lease, plus half of it, "+
		"has surely ended (docs/control-plane.md, Fencing). At most two thirds of --node-grace")
	f.IntVar(&c.MaxFailures, "max-failures", 5, "failed incarnations in a row (without finishing an epoch) after which a job is marked failed; -1: retry forever")
	f.Float64Var(&c.TimeScale, "time-scale", 1, "emulated seconds per real second of the cluster's emulated workers")
	f.StringVar(&c.CheckpointRoot, "checkpoint-root", "", "the cluster's checkpoint root: each job checkpoints in ROOT/<job id> (or, with resume_from, in a finished job's of "+
		"its submitter), a directory every agent reaches (shared storage). Set once when the cluster is bootstrapped; a server "+
		"started later with another root refuses to run. Without one, the cluster takes no jobs")
	f.DurationVar(&c.Retain, "retain", 7*24*time.Hour, "prune finished jobs and dead nodes from the state this long after they finished (0: keep them)")
	f.StringVar(&c.Topology, "topology", "", "where this server sits: level=domain pairs, innermost first, e.g. rack=r1,zone=z1 (empty: the default rack)")
	f.StringVar(&o.levels, "topology-levels", "rack", "the cluster's topology levels, innermost (rack) first, e.g. rack,zone: set once when the "+
		"cluster is bootstrapped; a server given other levels refuses to run, and agents must declare every level in this order")
	f.StringVar(&o.policy, "policy", "auto", "allocation policy: auto (pollux on one GPU type, pollux-het on several), pollux, pollux-het, sia, pollux-unaware or tiresias (user-sized jobs, no resizing)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	securityFlags(f, &c.Security)
	autoscaleFlags(f, &c.Autoscale)
	federationFlags(f, &c.Federation)
	o.conf.Register(f)
	return cmd
}

// serverConfig maps the flags that need it to the server's Config.
func serverConfig(cmd *cobra.Command, o serverFlags) (server.Config, error) {
	c := o.cfg
	var err error
	if c.Logger, c.LibLogger, err = loggers(cmd.ErrOrStderr(), o.logLevel); err != nil {
		return c, usage.Wrap(err)
	}
	if cmd.Flags().Changed("topology-levels") {
		if c.Levels, err = topology.ParseLevels(o.levels); err != nil {
			return c, usage.Wrap(fmt.Errorf("server: --topology-levels: %w", err))
		}
	}
	if c.Policy, c.TypedPolicy, err = serverPolicy(o.policy); err != nil {
		return c, usage.Wrap(err)
	}
	c.PolicyName = o.policy
	if err := checkAutoscaleFlags(cmd.Flags(), c.Autoscale.Provider); err != nil {
		return c, usage.Wrap(err)
	}
	if c.Peers, err = server.ParsePeers(o.peers); err != nil {
		return c, usage.Wrap(err)
	}
	catalog, err := builtin.Catalog()
	if err != nil {
		return c, err
	}
	c.Apps, c.AppLimits = catalog.Names(), appLimits(catalog)
	c.OnReady = func(r server.Ready) { printReady(cmd.OutOrStdout(), r) }
	return c, nil
}

// loggers are a server's or agent's log at level and its libraries'
// (which log every connection at info: they keep only their warnings
// unless level is debug).
func loggers(w io.Writer, level string) (log, lib *slog.Logger, err error) {
	if log, err = newLogger(w, level); err != nil {
		return nil, nil, err
	}
	lib = log
	if level != "debug" {
		lib, _ = newLogger(w, "warn")
	}
	return log, lib, nil
}

// newLogger is a text slog logger at the named level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("bad log level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// printReady prints a server's or agent's ready line: one JSON object.
func printReady(w io.Writer, ready any) {
	b, _ := json.Marshal(ready)
	fmt.Fprintln(w, string(b))
}

// appLimits are the batch limits of the built-in applications of
// catalog, a spec's defaults.
func appLimits(catalog testbed.Catalog) jobspec.AppLimits {
	return func(app string) (goodput.Limits, bool) {
		a, ok := catalog[app]
		if !ok {
			return goodput.Limits{}, false
		}
		return a.Limits(), true
	}
}
