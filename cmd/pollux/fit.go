package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"pollux/internal/usage"
	"pollux/testbed/tracefit"
)

func init() { subcommands = append(subcommands, newFitCmd) }

func newFitCmd() *cobra.Command {
	var (
		traces  string
		asJSON  bool
		workers int
	)
	cmd := &cobra.Command{
		Use:   "fit --traces DIR",
		Short: "Fit the throughput model of every application in a trace directory and report its errors",
		Long:  longHelp("fit", false),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if traces == "" {
				return usage.Wrap(fmt.Errorf("fit: --traces DIR is required"))
			}
			apps, err := tracefit.Apps(traces, workers, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"apps": apps})
			}
			return tracefit.WriteTable(cmd.OutOrStdout(), apps)
		},
	}
	cmd.Flags().StringVar(&traces, "traces", "", "trace directory in the artifact layout (DIR/<app>/placements.csv, scalability.csv)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	cmd.Flags().IntVar(&workers, "parallel", runtime.GOMAXPROCS(0), "fits to run at once for the leave-one-out error")
	return cmd
}
