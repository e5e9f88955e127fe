package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/internal/usage"
	"pollux/testbed/chaos/attack"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/labloss"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/chaos/suite"
	"pollux/testbed/launch"
)

func init() { subcommands = append(subcommands, newChaosCmd) }

// chaosFlags are the flags of `pollux chaos`.
type chaosFlags struct {
	scenario, dir, logLevel, network, judge string
	seed                                    uint64
	jsonOut                                 bool
	exec                                    []string
	o                                       driver.Options
	leaseTTL                                time.Duration
}

func newChaosCmd() *cobra.Command {
	var c chaosFlags
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Fault injection: run a cluster through a seeded fault schedule and judge it from independent observers",
		Long:  longHelp("chaos", true, "scenarios", strings.Join(schedule.Names(), ", ")),
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runChaosCmd(cmd, &c) },
	}
	f := cmd.Flags()
	f.StringVar(&c.scenario, "scenario", "mixed", "scenario to run, or all")
	f.Uint64Var(&c.seed, "seed", 1, "seed of the fault schedules and the workload")
	f.BoolVar(&c.jsonOut, "json", false, "print one JSON object instead of a table")
	f.StringVar(&c.dir, "dir", "", "keep every run's data, logs, history and worker records under this directory (default: a temporary one, removed after a run that passes)")
	f.StringVar(&c.judge, "judge", "", "judge again the kept run directories under DIR (from --dir) instead of running anything")
	f.StringVar(&c.network, "network", "auto", "auto (namespaces when possible), netns or loopback; network faults need netns, and a run that cannot inject them fails unless loopback opts out")
	f.StringVar(&c.logLevel, "log-level", "", "level of the driver's progress log on stderr (default info, warn with --json)")
	f.StringVar(&c.o.LogLevel, "process-log-level", "warn", "log level of the servers and agents (their logs are kept with --dir)")
	f.Float64Var(&c.o.TimeScale, "time-scale", 400, "emulated seconds per real second")
	f.DurationVar(&c.o.Converge, "converge", 120*time.Second, "bound on the wait, after the last fault, until every job has finished")
	f.DurationVar(&c.leaseTTL, "lease-ttl", 10*time.Second, "lab-loss: the leases' time to live (federation terms lease_ttl_s)")
	f.StringSliceVar(&c.exec, "exec", nil, "program (and leading arguments) that runs `pollux` (default: this binary)")
	_ = f.MarkHidden("exec")
	return cmd
}

// runChaosCmd runs the scenario --scenario names (or judges --judge) on
// the options of the flags.
func runChaosCmd(cmd *cobra.Command, c *chaosFlags) error {
	var scs []schedule.Scenario
	var err error
	switch {
	case c.scenario == "lab-loss":
		if err := refuseFlags(cmd, "chaos: --%s cannot be used with --scenario lab-loss", "judge", "network"); err != nil {
			return err
		}
		if err := labLossOptions(cmd, c).Check(); err != nil {
			return err
		}
	case c.judge != "":
		return suite.Judge(c.judge, c.jsonOut, cmd.OutOrStdout())
	case c.scenario != "attack":
		if scs, err = schedule.Lookup(c.scenario); err != nil {
			return usage.Wrap(err)
		}
	}
	o := c.o
	if o.Logger, err = chaosLogger(cmd.ErrOrStderr(), c.logLevel, c.jsonOut); err != nil {
		return err
	}
	if c.scenario != "lab-loss" && c.scenario != "attack" {
		if o.Network, err = suite.Network(c.network, o.Logger); err != nil {
			return err
		}
	}
	if o.Exec, err = ownExec(c.exec); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch c.scenario {
	case "lab-loss":
		lo := labLossOptions(cmd, c)
		lo.Exec, lo.Logger = o.Exec, o.Logger
		return suite.LabLoss(ctx, lo, c.jsonOut, cmd.OutOrStdout())
	case "attack":
		return suite.Attack(ctx, attack.Options{Exec: o.Exec, Dir: c.dir, TimeScale: o.TimeScale, LogLevel: o.LogLevel, Logger: o.Logger},
			c.jsonOut, cmd.OutOrStdout())
	}
	o.Dir = c.dir
	var lo *labloss.Options
	if c.scenario == schedule.All {
		all := labLossOptions(cmd, c)
		all.Exec, all.Logger, all.Dir = o.Exec, o.Logger, ""
		if c.dir != "" {
			all.Dir = filepath.Join(c.dir, fmt.Sprintf("lab-loss-seed%d", c.seed))
		}
		lo = &all
	}
	return suite.Run(ctx, scs, lo, c.seed, o, c.network == string(launch.Loopback), c.jsonOut, cmd.OutOrStdout())
}

// labLossOptions are the lab-loss scenario's options of the flags: a
// time scale of 100 unless --time-scale is given, so that the jobs run
// long enough to be running at the loss and after the restart.
func labLossOptions(cmd *cobra.Command, c *chaosFlags) labloss.Options {
	o := labloss.Options{Dir: c.dir, Seed: c.seed, TimeScale: 100, TTL: c.leaseTTL, Converge: c.o.Converge, LogLevel: c.o.LogLevel}
	if cmd.Flags().Changed("time-scale") {
		o.TimeScale = c.o.TimeScale
	}
	return o
}

// chaosLogger is the harness's logger on w: info, or warnings only with
// --json, unless --log-level names another level.
func chaosLogger(w io.Writer, logLevel string, jsonOut bool) (*slog.Logger, error) {
	lvl := slog.LevelInfo
	if jsonOut {
		lvl = slog.LevelWarn
	}
	if err := lvl.UnmarshalText([]byte(logLevel)); logLevel != "" && err != nil {
		return nil, usage.Wrap(fmt.Errorf("chaos: --log-level %q: %w", logLevel, err))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// ownExec is exec, or this executable when exec is empty.
func ownExec(exec []string) ([]string, error) {
	if len(exec) > 0 {
		return exec, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("chaos: finding own executable: %w", err)
	}
	return []string{self}, nil
}
