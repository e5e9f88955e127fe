package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/spf13/cobra"

	"pollux/cluster/pki"
	"pollux/internal/secure"
	"pollux/internal/usage"
	"pollux/testbed/controlplane"
)

func init() {
	benchCommands = append(benchCommands, newBenchControlPlaneCmd, newBenchControlPlaneNodesCmd)
}

// newBenchControlPlaneNodesCmd is the node process of `pollux bench
// controlplane` (hidden): its configuration on stdin, its nodes'
// addresses on stdout.
func newBenchControlPlaneNodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:    controlplane.NodesCommand[1],
		Short:  "The node process of bench controlplane (configuration on stdin)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return controlplane.ServeNodes(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), remoteOptionsOf)
		},
	}
}

// remoteOptionsOf configures an actor system's gRPC as servers and
// agents do (TLS with creds, plaintext without), its listener's gate
// counting the bench's peers, all on this machine, as members.
func remoteOptionsOf(creds *pki.Credentials, log *slog.Logger) ([]remote.ConfigOption, error) {
	if creds == nil {
		return secure.RemoteOptions(nil, nil, log)
	}
	return secure.RemoteOptions(creds, secure.LocalGate(pki.ChannelActor, log), log)
}

func newBenchControlPlaneCmd() *cobra.Command {
	var (
		o          = controlplane.Options{RemoteOptions: remoteOptionsOf}
		transport  string
		asJSON     bool
		oneProcess bool
	)
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Round time and quality, Raft writes, report ingestion and failover of the whole control plane in one process",
		Long:  longHelp("bench-controlplane", true),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch transport {
			case "remote":
			case "local":
				o.Local = true
			default:
				return usage.Wrap(fmt.Errorf("bench controlplane: --transport %q: want remote or local", transport))
			}
			if err := o.Validate(); err != nil {
				return usage.Wrap(fmt.Errorf("bench controlplane: %w", err))
			}
			if !oneProcess {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("bench controlplane: %w", err)
				}
				o.Executable = exe
			}
			rep, err := controlplane.Run(cmd.Context(), o, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Nodes, "nodes", 512, "node actors")
	f.IntVar(&o.Jobs, "jobs", 1024, "jobs")
	f.IntVar(&o.GPUs, "gpus", 4, "GPUs per node")
	f.IntVar(&o.Rounds, "rounds", 10, "rounds timed")
	f.IntVar(&o.Failovers, "failovers", 5, "leader kills timed")
	f.DurationVar(&o.Interval, "interval", 5*time.Second, "scheduling interval (Pollux's is 60 s; a 512-node round takes about a second here, and rounds back to back leave nodes behind the newest assignment, so their leases lapse)")
	f.DurationVar(&o.ReportEvery, "report-every", 50*time.Millisecond, "time between two reports of one worker (every rank reports)")
	f.DurationVar(&o.Warmup, "warmup", 2*time.Minute, "longest wait for the jobs to be placed before timing")
	f.DurationVar(&o.Settle, "settle", 20*time.Second, "time the placed jobs run (profile, bid, scale out) before timing")
	f.DurationVar(&o.Heartbeat, "heartbeat", 750*time.Millisecond, "Raft heartbeat timeout (longer than a server's 200 ms: three servers and the whole cluster share this machine's cores; "+
		"shorter than Raft's own 1 s, with which the median time from a leader's kill to the next leader's first round was over 2 s in 6 of 9 runs, docs/benchmarks.md)")
	f.DurationVar(&o.Election, "election", 750*time.Millisecond, "Raft election timeout")
	f.DurationVar(&o.Lease, "lease", 500*time.Millisecond, "Raft leader lease timeout")
	f.DurationVar(&o.AgentLease, "agent-lease", 5*time.Second, "the nodes' lease (a server's --agent-lease; its default, 2 s, is too short here: a renewal extends a lease from the node's ack it echoes, "+
		"so two round trips must fit in one lease, and with every node's messages queued behind the workers' reports on this machine's cores a round trip takes up to a second, docs/benchmarks.md)")
	f.StringVar(&transport, "transport", "remote", "remote (protoactor over gRPC, an actor system and listener per server and per node) or local (one actor system)")
	f.BoolVar(&o.Insecure, "insecure", false, "plaintext Raft, actor messages and gossip (a baseline for the cost of TLS)")
	f.StringVar(&o.LogLevel, "log-level", "error", "log level of the servers and nodes (to stderr)")
	f.BoolVar(&oneProcess, "one-process", false, "run the nodes in the servers' process (by default, with the remote transport, they run in a second, nicer process, so that their gossip does not take the cores the servers' Raft timers need)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed rounds to this file")
	_ = f.MarkHidden("cpuprofile")
	return cmd
}
