package main

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/testbed/fedbench"
)

func init() { benchCommands = append(benchCommands, newBenchFederationCmd) }

func newBenchFederationCmd() *cobra.Command {
	var asJSON bool
	var self []string
	var o fedbench.Options
	cmd := &cobra.Command{
		Use:   "federation",
		Short: "Federated labs: lease decisions committed in both labs' Raft logs per second, and the time to notice a lost lab",
		Long: `Lease decisions: --labs labs run in this process, each a Raft group of
--servers servers (in-memory Raft transport, bolt logs on disk) with its
own CA and its federation listener on 127.0.0.1 over mutual TLS 1.3. The
first lab grants, renews and reclaims --leases leases of whole nodes to the
others (--concurrency at a time), each by the two-cluster commit of
docs/federation.md; then every lab's ledger is read from its Raft state and
every lease must have ended as reclaimed on both sides.

Loss detection: --labs ` + "`pollux server`" + ` processes (one server per lab, its own
CA and federation file, all in the federation's WAN gossip pool unless
--no-gossip) exchange bids every --interval; one at a time is SIGKILLed,
and the time until the first lab logs it lost is measured --trials times
(the lab restarted in between), with what noticed it first: the gossip
pool (the lab's servers gone from it) or the bid exchange (no bid for two
intervals).

Targets (issue 17): at least 50 lease decisions/s, detection within 10 s.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var progress io.Writer = cmd.ErrOrStderr()
			if asJSON {
				progress = io.Discard
			}
			o.Exec = func(args []string) *exec.Cmd {
				if len(self) == 0 {
					return selfMember(args)
				}
				return exec.Command(self[0], append(slices.Clone(self[1:]), args...)...)
			}
			rep, err := fedbench.Run(cmd.Context(), o, progress)
			if err != nil {
				if errors.Is(err, fedbench.ErrConfig) {
					return badInput(err)
				}
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return printFederationBench(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Labs, "labs", 3, "labs (2-8)")
	f.IntVar(&o.Servers, "servers", 3, "Raft servers per lab in the decisions run (1, 3 or 5)")
	f.IntVar(&o.Leases, "leases", 200, "leases granted, renewed and reclaimed (1-1000)")
	f.IntVar(&o.Concurrency, "concurrency", 4, "leases in flight at once (each on a node of its own)")
	f.IntVar(&o.Trials, "trials", 3, "lab kills of the loss detection (0: skip it)")
	f.DurationVar(&o.Interval, "interval", time.Second, "the labs' bid exchange interval in the loss detection (--federation-interval)")
	f.BoolVar(&o.NoGossip, "no-gossip", false, "run the loss detection's labs without the federation's gossip pool (bid exchange only)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	f.StringSliceVar(&self, "exec", nil, "the command (comma-separated argv) that runs pollux for the lab processes (default: this binary)")
	return cmd
}

func printFederationBench(w io.Writer, r *fedbench.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "labs\t%d (%d Raft servers each)\n", r.Labs, r.ServersPerLab)
	fmt.Fprintf(tw, "lease decisions\t%d in %.2f s (%d leases, %d at a time)\n", r.Decisions, r.Seconds, r.Leases, r.Concurrency)
	fmt.Fprintf(tw, "lease decisions/s\t%.1f (target >= %.0f)\n", r.LeaseDecisionsPerS, r.Targets.DecisionsPerS)
	for _, op := range []string{"grant", "renew", "reclaim"} {
		l := r.Latency[op]
		fmt.Fprintf(tw, "%s\tp50 %.1f ms, p95 %.1f ms\n", op, l.P50, l.P95)
	}
	fmt.Fprintf(tw, "verified in every Raft state\t%v\n", r.Verified)
	if len(r.LossSamplesS) > 0 {
		fmt.Fprintf(tw, "loss detection\tmedian %.2f s, max %.2f s over %d kills (target <= %.0f s)\n", r.LossDetectionS, r.LossDetectionMaxS,
			len(r.LossSamplesS), r.Targets.LossDetectionS)
		fmt.Fprintf(tw, "detector\t%s, interval %.2f s; first noticed by %v\n", r.LossDetector, r.IntervalS, r.LossDetectedBy)
	}
	fmt.Fprintf(tw, "targets met\t%v\n", r.Targets.Met)
	return tw.Flush()
}
