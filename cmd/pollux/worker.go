package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/actors/node/workerproto"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
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
		Long: "Runs one emulated training worker of a built-in application profile at a time scale, " +
			"reading its configuration from the POLLUX_* environment (see docs/worker-protocol.md): " +
			"it restores from its checkpoint directory, reports to its report address, checkpoints " +
			"and exits 0 on SIGTERM.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			began := mono.Now()
			env, err := workerproto.ParseEnv(os.LookupEnv)
			if err != nil {
				return badInput(err)
			}
			// The worker's own record (only under the fault-injection
			// harness, which sets record.EnvDir): its start, read before
			// anything else, and its exit, the last thing it does.
			rec, err := record.FromEnv(began, env.JobID, env.Incarnation, env.Rank, env.GPUs)
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			defer func() {
				code := 0
				var ue usageError
				switch {
				case errors.As(err, &ue):
					code = 2
				case err != nil:
					code = 1
				}
				if rerr := rec.Exit(code); rerr != nil && err == nil {
					err = fmt.Errorf("worker: %w", rerr)
				}
			}()
			catalog, err := builtin.Catalog()
			if err != nil {
				return err
			}
			profile, ok := catalog[app]
			if !ok {
				return badInput(fmt.Errorf("worker: unknown application %q (built-in: %s)", app, strings.Join(catalog.Names(), ", ")))
			}
			if !(scale > 0) {
				return badInput(fmt.Errorf("worker: --time-scale %v, want > 0", scale))
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)).With("job", env.JobID, "incarnation", env.Incarnation, "rank", env.Rank)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			st, err := emulator.Run(ctx, emulator.Config{
				Env: env, App: profile, TimeScale: scale, RestartCost: restartCost,
				ReportEvery: reportEvery, Logger: log, Record: rec,
			})
			if err != nil {
				return err
			}
			log.Info("worker: exiting", "epoch", st.Epoch, "progress", st.Progress, "done", st.Done)
			return nil
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
