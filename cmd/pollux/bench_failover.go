package main

import (
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"pollux/consensus"
	"pollux/internal/usage"
	"pollux/testbed/failover"
)

func init() {
	benchCommands = append(benchCommands, newBenchFailoverCmd)
	subcommands = append(subcommands, newConsensusMemberCmd)
}

// selfMember re-executes this binary.
func selfMember(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

func newBenchFailoverCmd() *cobra.Command {
	var asJSON bool
	d := consensus.DefaultConfig("")
	o := failover.Options{Member: selfMember}
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Kill the Raft leader of a real cluster repeatedly and time the next committed write; measure allocation commits per second",
		Long:  longHelp("bench-failover", false),
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return usage.Wrap(err)
			}
			var progress io.Writer = cmd.ErrOrStderr()
			if asJSON {
				progress = io.Discard
			}
			rep, err := failover.Run(cmd.Context(), o, progress, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Servers, "servers", 3, "servers in the cluster")
	f.IntVar(&o.Trials, "trials", 20, "leader kills")
	f.IntVar(&o.Allocs, "allocs", 20000, "allocations to commit in the throughput run (0: skip it)")
	f.IntVar(&o.Batch, "batch", 256, "allocations pipelined per batch in the throughput run")
	f.DurationVar(&o.Heartbeat, "heartbeat", d.HeartbeatTimeout, "Raft heartbeat timeout")
	f.DurationVar(&o.Election, "election", d.ElectionTimeout, "Raft election timeout")
	f.DurationVar(&o.Lease, "lease", d.LeaderLeaseTimeout, "Raft leader lease timeout")
	f.BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	f.BoolVar(&o.Keep, "keep", false, "keep the servers' data directories and logs (path printed on stderr)")
	f.BoolVar(&o.Insecure, "insecure", false, "run the servers without TLS only")
	f.IntVar(&o.Flood, "flood", 0, "also run the benchmark under a flood of this many silent connections from "+failover.FloodSource+
		" to each server's Raft and HTTP port, and report its failover and status times beside those without (0: no flood run)")
	f.BoolVar(&o.Baseline, "plaintext-baseline", true, "after the TLS run, run the same benchmark without TLS and report the cost of TLS")
	return cmd
}

// newConsensusMemberCmd is the hidden server process the benchmark
// starts (failover.RunMember): mutual TLS on its Raft port and HTTPS
// unless --insecure. It exits when its stdin closes.
func newConsensusMemberCmd() *cobra.Command {
	var o failover.MemberOptions
	cmd := &cobra.Command{
		Use:    "consensus-member",
		Short:  "One consensus server process (used by pollux bench failover)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return usage.Wrap(err)
			}
			return failover.RunMember(o, cmd.InOrStdin(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.ID, "id", "", "server id")
	f.StringVar(&o.Dir, "dir", "", "data directory")
	f.StringVar(&o.Raft, "raft", "127.0.0.1:0", "Raft TCP address")
	f.StringVar(&o.HTTP, "http", "127.0.0.1:0", "HTTP address")
	f.StringVar(&o.Peers, "peers", "", "every server as id=raftaddr=httpaddr, comma-separated")
	f.BoolVar(&o.Bootstrap, "bootstrap", false, "bootstrap the cluster from --peers")
	f.DurationVar(&o.Heartbeat, "heartbeat", 200*time.Millisecond, "Raft heartbeat timeout")
	f.DurationVar(&o.Election, "election", 200*time.Millisecond, "Raft election timeout")
	f.DurationVar(&o.Lease, "lease", 100*time.Millisecond, "Raft leader lease timeout")
	f.StringVar(&o.CA, "ca", "", "cluster CA certificate")
	f.StringVar(&o.Cert, "cert", "", "this server's certificate")
	f.StringVar(&o.Key, "key", "", "this server's key")
	f.BoolVar(&o.Insecure, "insecure", false, "plaintext Raft port and HTTP")
	return cmd
}
