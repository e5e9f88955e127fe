package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"pollux/testbed/realdemo"
)

// runRealDemoCmd is `pollux demo --real`: it fills in what the command
// line leaves to the binary (itself as the cluster's program, the run
// directory, the workload) and runs the demo until ctx ends, Ctrl-C or
// timeout.
func runRealDemoCmd(cmd *cobra.Command, o realdemo.Options, augment, minEpochs int, spread, timeout time.Duration,
	dir string, keep, asJSON bool) error {
	if o.Servers < 1 || o.Agents < 1 || o.Slots < 1 || augment < 1 || minEpochs < 1 || spread < 0 || timeout <= 0 {
		return badInput(fmt.Errorf("demo: --real needs at least one server, agent, CPU slot, augmentation and epoch, and a positive timeout"))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pollux-demo-real-"); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if !keep {
			defer os.RemoveAll(dir)
		}
	}
	o.Exec, o.Dir = []string{self}, dir
	o.Jobs = realdemo.Workload(spread/2, augment, minEpochs)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return runRealDemo(ctx, o, asJSON, cmd.OutOrStdout(), cmd.ErrOrStderr())
}

// runRealDemo runs the real demo with o, progress on stderr, and prints
// the result on stdout (JSON with asJSON, else a table) whenever the jobs
// completed, also when the run fell short of what it shows (the error
// then says what).
func runRealDemo(ctx context.Context, o realdemo.Options, asJSON bool, stdout, stderr io.Writer) error {
	o.Progress = stderr
	start := time.Now()
	res, err := realdemo.Run(ctx, o)
	if err != nil && !errors.Is(err, realdemo.ErrShort) {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(stderr, "done in %.0f s\n", time.Since(start).Seconds())
	if asJSON {
		b, jerr := json.Marshal(res)
		if jerr != nil {
			return fmt.Errorf("demo: %w", jerr)
		}
		fmt.Fprintln(stdout, string(b))
	} else if werr := res.WriteTable(stdout); werr != nil {
		return fmt.Errorf("demo: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}
