package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

func init() { subcommands = append(subcommands, newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var (
		servers, agents, gpus int
		scale                 float64
		spread, timeout       time.Duration
		dir                   string
		keep                  bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole cluster on this machine (servers, agents, emulated GPU workers) through a small mixed workload",
		Long: `demo starts --servers control-plane servers and --agents node agents of
--gpus emulated GPUs each as separate processes on 127.0.0.1, submits a
dozen jobs of the built-in applications over --spread, shows the cluster's
progress once a second (leader, allocation generation, GPUs in use, each
running job's GPUs and epoch), prints the job completion times and stops
every process it started, also on Ctrl-C. Emulated time runs --time-scale
times faster than real time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if servers < 1 || agents < 1 || gpus < 1 || !(scale > 0) || spread < 0 || timeout <= 0 {
				return badInput(fmt.Errorf("demo: need at least one server, agent and GPU, a positive time scale and timeout"))
			}
			cat, err := builtin.Catalog()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "pollux-demo-"); err != nil {
					return fmt.Errorf("demo: %w", err)
				}
				if !keep {
					defer os.RemoveAll(dir)
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "starting %d servers and %d agents of %d emulated GPUs on 127.0.0.1 (logs in %s)\n", servers, agents, gpus, dir)
			c, err := launch.Start(ctx, launch.Options{
				Exec: []string{self}, Dir: dir,
				Servers: servers, Agents: agents, GPUsPerAgent: gpus, TimeScale: scale,
			})
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			fmt.Fprintf(out, "mutual TLS and encrypted gossip on (CA, certificates and gossip key in %s)\n", c.TLS().Dir)
			fmt.Fprintf(out, "API tokens on (the cluster's admin token is in %s)\n", c.TokenFile())
			// Stop every process on every way out, Ctrl-C included.
			defer func() {
				fmt.Fprintln(out, "stopping the cluster")
				if err := c.Stop(); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "pollux: demo:", err)
				}
			}()
			jobs := launch.DemoWorkload(spread)
			fmt.Fprintf(out, "submitting %d jobs over %v; time runs %gx\n", len(jobs), spread, scale)
			res, err := c.Run(ctx, cat, jobs, launch.RunOptions{TimeScale: scale, Progress: out})
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			return launch.WriteResults(out, res)
		},
	}
	f := cmd.Flags()
	f.IntVar(&servers, "servers", 3, "control-plane servers")
	f.IntVar(&agents, "agents", 4, "node agents")
	f.IntVar(&gpus, "gpus", 4, "emulated GPUs per agent")
	f.Float64Var(&scale, "time-scale", 300, "emulated seconds per real second")
	f.DurationVar(&spread, "spread", 30*time.Second, "real time over which the jobs are submitted")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "give up (and stop the cluster) after this long")
	f.StringVar(&dir, "dir", "", "directory for data and logs (default: a temporary one, removed afterwards)")
	f.BoolVar(&keep, "keep", false, "keep the temporary directory")
	return cmd
}
