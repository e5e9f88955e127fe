package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/internal/usage"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/record"
)

// ProcessOptions are the settings of one emulated worker process
// (`pollux worker --emulate APP`); the rest of its configuration is its
// POLLUX_* environment (docs/worker-protocol.md), read with LookupEnv.
type ProcessOptions struct {
	App         string // a built-in application profile
	TimeScale   float64
	RestartCost time.Duration
	ReportEvery time.Duration
	LookupEnv   func(string) (string, bool)
	Log         io.Writer
}

// Process is one emulated worker process: it reads its environment,
// emulates the built-in application o.App until its training ends or
// SIGTERM (or SIGINT, or the end of ctx), and logs its exit. Under the
// fault-injection harness (record.EnvDir set) it writes its own record:
// its start, read before anything else, and its exit, the last thing it
// does (code 2 for bad input, 1 for another error). Errors caused by the
// environment or the options are marked as bad input.
func Process(ctx context.Context, o ProcessOptions) (err error) {
	began := mono.Now()
	env, err := workerproto.ParseEnv(o.LookupEnv)
	if err != nil {
		return usage.Wrap(err)
	}
	rec, err := record.FromEnv(began, env.JobID, env.Incarnation, env.Rank, env.GPUs)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer func() {
		code := 0
		switch {
		case errors.Is(err, usage.ErrBadSetting):
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
	profile, ok := catalog[o.App]
	if !ok {
		return usage.Errorf("worker: unknown application %q (built-in: %s)", o.App, strings.Join(catalog.Names(), ", "))
	}
	if !(o.TimeScale > 0) {
		return usage.Errorf("worker: --time-scale %v, want > 0", o.TimeScale)
	}
	log := slog.New(slog.NewTextHandler(o.Log, nil)).With("job", env.JobID, "incarnation", env.Incarnation, "rank", env.Rank)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, err := Run(ctx, Config{
		Env: env, App: profile, TimeScale: o.TimeScale, RestartCost: o.RestartCost,
		ReportEvery: o.ReportEvery, Logger: log, Record: rec,
	})
	if err != nil {
		return err
	}
	log.Info("worker: exiting", "epoch", st.Epoch, "progress", st.Progress, "done", st.Done)
	return nil
}
