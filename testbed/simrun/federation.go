package simrun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/fedsim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

// Example is the federation file name that names the built-in example
// (kept as testbed/fedsim/example.json).
const Example = "example"

// FederationOptions are a simulation of federated labs (the flags of
// `pollux sim --federation`).
type FederationOptions struct {
	// File is the federation file, or Example; Workload ("": the file's
	// workloads) a directory holding the labs' workload files; Traces
	// the applications ("": the built-in profiles).
	File, Workload, Traces string
	Parallel               int
	Seed                   uint64
	JSON                   bool
	// PolicyOptions are the registry options of the policies the labs'
	// files name (optimizer.Lookup); Workers is set here.
	PolicyOptions optimizer.Options
}

// Federation is `pollux sim --federation FILE`: every lab of the file
// with its own cluster and workload, isolated, merged and federated.
func Federation(ctx context.Context, o FederationOptions, stdout, stderr io.Writer) error {
	if o.Parallel < 1 {
		return usage.Errorf("sim: --parallel %d: want at least 1", o.Parallel)
	}
	fed, cat, wls, err := o.inputs()
	if err != nil {
		return err
	}
	runs := len(fed.Labs) + 2
	workers := min(o.Parallel, runs)
	popts := o.PolicyOptions
	popts.Workers = max(1, runtime.GOMAXPROCS(0)/workers)
	var mu sync.Mutex
	last := map[string]string{}
	start := time.Now()
	opt := fedsim.Options{
		Catalog: cat,
		Seed:    o.Seed,
		NewPolicy: func(name string) (optimizer.Policy, error) {
			return optimizer.Lookup(name, popts)
		},
		Parallel: workers,
		// One line per mode whenever a tenth more of its jobs completed.
		Progress: func(mode string, done, total int) {
			mu.Lock()
			defer mu.Unlock()
			line := fmt.Sprintf("%d/%d", done*10/max(total, 1), 10)
			if last[mode] != line {
				last[mode] = line
				fmt.Fprintf(stderr, "sim: %s: %d of %d jobs completed (%.0f s)\n", mode, done, total, time.Since(start).Seconds())
			}
		},
		Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	rep, err := fedsim.Run(ctx, fed, wls, opt)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	fmt.Fprintf(stderr, "simulated %d labs in 3 modes in %.1f s\n", len(fed.Labs), time.Since(start).Seconds())
	if o.JSON {
		return jsonout.Write(stdout, rep)
	}
	return printFederation(stdout, fed, rep)
}

// inputs are the federation of the file (or the built-in example), the
// applications and every lab's workload.
func (o FederationOptions) inputs() (*fedsim.Federation, testbed.Catalog, []workload.Workload, error) {
	data, base, name := fedsim.Example(), "", "example"
	if o.File != Example {
		var err error
		if data, err = os.ReadFile(o.File); err != nil {
			return nil, nil, nil, usage.Errorf("sim: --federation: %w", err)
		}
		base, name = filepath.Dir(o.File), o.File
	}
	fed, err := fedsim.Decode(data, name)
	if err != nil {
		return nil, nil, nil, usage.Errorf("sim: %w", err)
	}
	if o.Workload != "" {
		if st, err := os.Stat(o.Workload); err != nil || !st.IsDir() {
			return nil, nil, nil, usage.Errorf("sim: --workload %s: with --federation, give the directory holding the labs' workload files", o.Workload)
		}
	}
	cat, err := federationCatalog(o.Traces)
	if err != nil {
		return nil, nil, nil, usage.Wrap(err)
	}
	check := func(app string) error {
		if _, ok := cat[app]; !ok {
			return fmt.Errorf("%w %q", workload.ErrUnknownApp, app)
		}
		return nil
	}
	wls, err := fed.Workloads(o.Workload, base, check)
	if err != nil {
		return nil, nil, nil, usage.Errorf("sim: %w", err)
	}
	return fed, cat, wls, nil
}

// federationCatalog is the applications of --traces, or the built-in
// profiles.
func federationCatalog(traces string) (testbed.Catalog, error) {
	if traces == "" {
		return builtin.Catalog()
	}
	if _, err := os.Stat(traces); err != nil {
		return nil, fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
	}
	return trace.Load(traces)
}

// printFederation writes the per-lab table of every mode and the targets.
func printFederation(w io.Writer, fed *fedsim.Federation, rep *fedsim.Report) error {
	modes := []struct {
		name string
		m    *fedsim.ModeReport
	}{{"isolated", rep.Modes.Isolated}, {"merged", rep.Modes.Merged}, {"federated", rep.Modes.Federated}}
	fmt.Fprintf(w, "%-10s %-8s %5s %5s %10s %10s %9s %9s %9s %8s %9s\n", "mode", "lab", "GPUs", "jobs", "avg JCT s", "p99 JCT s", "worst FTF", "lent GPUh", "borr GPUh", "reclaims", "recl p95")
	for _, m := range modes {
		for _, lab := range fed.Labs {
			l := m.m.Labs[lab.Name]
			fmt.Fprintf(w, "%-10s %-8s %5d %5d %10.0f %10.0f %9.2f %9.1f %9.1f %8d %9.0f\n", m.name, lab.Name, l.GPUs, l.Jobs, l.AvgJCT, l.P99JCT, l.WorstFTF, l.GPUHoursLent, l.GPUHoursBorrowed, l.Reclaims, l.ReclaimP95)
		}
		fmt.Fprintf(w, "%-10s %-8s %5s %5s %10.0f   (mean of the labs' averages; %.0f over all jobs)\n", m.name, "mean", "", "", m.m.MeanAvgJCT, m.m.AvgJCT)
	}
	if l := rep.Modes.Federated.Leases; l != nil {
		fmt.Fprintf(w, "leases: %d grants, %d renewals, %d reclaims, %d rebalances, %d releases, %d expiries\n", l.Grants, l.Renewals, l.Reclaims, l.Rebalances, l.Releases, l.Expiries)
	}
	for _, o := range rep.Modes.Federated.Outages {
		fmt.Fprintf(w, "outage: %s lost at %.0f s, back at %.0f s; %d leases with it, the last left its peers' ledgers %.0f s after the loss (%d outlived their time to live)\n", o.Lab, o.LostAt, o.BackAt, o.Leases, o.LastExpiry, o.Outlived)
	}
	for _, r := range rep.Modes.Federated.Refused {
		fmt.Fprintf(w, "refused at %.0f s by %s: %s: %s\n", r.At, r.Lab, r.What, r.Error)
	}
	t := rep.Targets
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	fmt.Fprintf(w, "federated / merged mean average JCT: %.3f (target <= 1.10: %s)\n", t.FederatedOverMerged, verdict(t.FederatedOverMerged <= 1.10))
	fmt.Fprintf(w, "labs slower federated than isolated: %v (target none: %s)\n", t.LabsWorseThanIsolated, verdict(len(t.LabsWorseThanIsolated) == 0))
	fmt.Fprintf(w, "reclaim p95: %.0f s (target <= %.0f s, one interval: %s)\n", t.ReclaimP95, rep.Interval, verdict(t.ReclaimP95 <= rep.Interval))
	return nil
}
