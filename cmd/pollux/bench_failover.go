package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/consensus"
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
		Long: `Starts --servers consensus servers as separate processes on 127.0.0.1 (TCP
transport with mutual TLS, bolt log and file snapshots in temporary
directories; a CA and certificates are made there too), first
measures how many allocations per second the leader commits (pipelined in
batches of --batch), then --trials times: SIGKILLs the leader, times from
the kill until a write sent to a surviving server commits through a new
leader, and restarts the killed server on its data directory. Unless
--plaintext-baseline=false it then runs the same benchmark without TLS and
reports the cost of TLS; --insecure runs the plaintext benchmark only.`,
		Args: failoverNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return badInput(err)
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
			return printFailover(cmd.OutOrStdout(), rep)
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
	f.BoolVar(&o.Baseline, "plaintext-baseline", true, "after the TLS run, run the same benchmark without TLS and report the cost of TLS")
	return cmd
}

// failoverNoArgs refuses positional arguments as bad input (exit status 2).
func failoverNoArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return badInput(err)
	}
	return nil
}

func printFailover(w io.Writer, r failover.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	mode := "plaintext (--insecure)"
	if r.TLS {
		mode = "mutual TLS"
	}
	fmt.Fprintf(tw, "transport\t%s\n", mode)
	fmt.Fprintf(tw, "servers\t%d\n", r.Servers)
	fmt.Fprintf(tw, "timeouts\theartbeat %d ms, election %d ms, lease %d ms\n", r.HeartbeatMS, r.ElectionMS, r.LeaseMS)
	fmt.Fprintf(tw, "leader kills\t%d\n", r.Trials)
	fmt.Fprintf(tw, "kill -> next commit\tmedian %.3f s, p95 %.3f s, max %.3f s (min %.3f s, mean %.3f s)\n", r.MedianS, r.P95S, r.MaxS, r.MinS, r.MeanS)
	if r.Allocations > 0 {
		fmt.Fprintf(tw, "allocations committed\t%d in batches of %d: %.0f /s\n", r.Allocations, r.Batch, r.AllocsPerS)
	}
	if r.ThroughputRestarts > 0 {
		fmt.Fprintf(tw, "throughput restarts\t%d (a leader change during the run)\n", r.ThroughputRestarts)
	}
	if p := r.Plaintext; p != nil {
		fmt.Fprintf(tw, "plaintext baseline\tmedian %.3f s, p95 %.3f s, max %.3f s; %.0f allocations/s\n", p.MedianS, p.P95S, p.MaxS, p.AllocsPerS)
		fmt.Fprintf(tw, "cost of TLS\tfailover median x%.2f, allocation rate x%.2f\n", r.TLSCost.MedianRatio, r.TLSCost.AllocsRatio)
	}
	return tw.Flush()
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
		Args:   failoverNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return badInput(err)
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
