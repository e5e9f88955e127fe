package main

import (
	"errors"
	"io"
	"os/exec"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"pollux/internal/usage"
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
		Long:  longHelp("bench-federation", false),
		Args:  noArgs,
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
					return usage.Wrap(err)
				}
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return rep.WriteTable(cmd.OutOrStdout())
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
