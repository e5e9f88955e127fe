package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"pollux/testbed/builtin"
	"pollux/testbed/launch"
)

// Options are the settings of the emulated and the federation demos.
type Options struct {
	// Cluster is the shape and the clock of the cluster (of each lab);
	// its Exec defaults to this binary and its Dir to a temporary
	// directory, removed afterwards unless Keep.
	Cluster launch.Options
	Keep    bool
	// The jobs are submitted over Spread; Timeout bounds the workload.
	Spread, Timeout time.Duration
	// UI (emulated demo) prints the first server's dashboard URL and
	// keeps the cluster up after the workload until the context ends.
	UI bool
}

// prepare fills in the program (this binary) and the directory (a new
// temporary one named after prefix) a demo runs with; done removes that
// temporary directory unless keep.
func prepare(exec *[]string, dir *string, prefix string, keep bool) (done func(), err error) {
	done = func() {}
	if len(*exec) == 0 {
		self, err := os.Executable()
		if err != nil {
			return done, fmt.Errorf("demo: %w", err)
		}
		*exec = []string{self}
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", prefix); err != nil {
			return done, fmt.Errorf("demo: %w", err)
		}
		if !keep {
			d := *dir
			done = func() { os.RemoveAll(d) }
		}
	}
	return done, nil
}

// Emulated runs the emulated demo on the cluster of o through the demo
// workload, submitted over o.Spread, within o.Timeout; with o.UI it
// prints the first server's dashboard URL and keeps the cluster up after
// the workload until ctx ends (Ctrl-C or SIGTERM in pollux demo). Every
// process it started is stopped on every way out.
func Emulated(ctx context.Context, o Options, out, errOut io.Writer) error {
	cat, err := builtin.Catalog()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	co := o.Cluster
	done, err := prepare(&co.Exec, &co.Dir, "pollux-demo-", o.Keep)
	defer done()
	if err != nil {
		return err
	}
	// The signals end everything; the timeout only the workload.
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	fmt.Fprintf(out, "starting %d servers and %d agents of %d emulated GPUs on 127.0.0.1 (logs in %s)\n", co.Servers, co.Agents, co.GPUsPerAgent, co.Dir)
	c, err := launch.Start(runCtx, co)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(out, "mutual TLS and encrypted gossip on (CA, certificates and gossip key in %s)\n", c.TLS().Dir)
	fmt.Fprintf(out, "API tokens on (the cluster's admin token is in %s)\n", c.TokenFile())
	fmt.Fprintf(out, "to use the pollux CLI against this cluster, run (or paste) in another shell:\n%s\n", c.Exports())
	// Stop every process on every way out, Ctrl-C included.
	defer func() {
		fmt.Fprintln(out, "stopping the cluster")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(errOut, "pollux: demo:", err)
		}
	}()
	dashURL := ""
	if o.UI {
		tok, err := c.CreateToken(runCtx, "dashboard", "read")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		dashURL = launch.DashboardURL(c.Servers[0], tok.Secret)
		fmt.Fprintf(out, "dashboard: %s\n(%s)\n", dashURL, c.BrowserHint())
	}
	jobs := launch.DemoWorkload(o.Spread)
	fmt.Fprintf(out, "submitting %d jobs over %v; time runs %gx\n", len(jobs), o.Spread, co.TimeScale)
	res, err := c.Run(runCtx, cat, jobs, launch.RunOptions{TimeScale: co.TimeScale, Progress: out})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := launch.WriteResults(out, res); err != nil || !o.UI {
		return err
	}
	fmt.Fprintf(out, "the workload is done; the cluster stays up for the dashboard until Ctrl-C or SIGTERM\ndashboard: %s\n", dashURL)
	<-ctx.Done()
	return nil
}
