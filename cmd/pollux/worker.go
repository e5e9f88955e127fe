package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"pollux/testbed/emulator"
)

func init() { subcommands = append(subcommands, newWorkerCmd) }

// newWorkerCmd is `pollux worker --emulate APP`: an emulated GPU worker
// following docs/worker-protocol.md, started by a node agent.
func newWorkerCmd() *cobra.Command {
	var (
		app         string
		scale       float64
		restartCost time.Duration
		reportEvery time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker --emulate APP",
		Short: "Run one emulated GPU worker (started by pollux agent, configured by its environment)",
		Long:  longHelp("worker", false),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return emulator.Process(cmd.Context(), emulator.ProcessOptions{App: app, TimeScale: scale, RestartCost: restartCost,
				ReportEvery: reportEvery, LookupEnv: os.LookupEnv, Log: cmd.ErrOrStderr()})
		},
	}
	f := cmd.Flags()
	f.StringVar(&app, "emulate", "", "built-in application profile to emulate (required)")
	f.Float64Var(&scale, "time-scale", 1, "simulated seconds per real second")
	f.DurationVar(&restartCost, "restart-cost", 30*time.Second, "simulated start-up time before training progresses")
	f.DurationVar(&reportEvery, "report-every", 250*time.Millisecond, "real time between reports")
	_ = cmd.MarkFlagRequired("emulate")
	return cmd
}
