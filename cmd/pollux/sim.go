package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/report"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

func init() { subcommands = append(subcommands, newSimCmd) }

// simPolicies builds a fresh policy per run: p is the Pollux fairness
// exponent, workers the goroutines a policy may use.
var simPolicies = map[string]func(p float64, workers int) optimizer.Policy{
	"pollux": func(p float64, workers int) optimizer.Policy {
		pol := optimizer.NewPollux()
		pol.PowerMean = p
		pol.Workers = workers
		return pol
	},
	"tiresias": func(float64, int) optimizer.Policy { return optimizer.Tiresias{} },
	"optimus":  func(float64, int) optimizer.Policy { return optimizer.Optimus{} },
}

// simPolicyOrder is the order runs and tables list policies in.
var simPolicyOrder = []string{"pollux", "tiresias", "optimus"}

// generatedWorkloads is how many workloads `pollux sim` draws when no
// --workload is given.
const generatedWorkloads = 2

type simFlags struct {
	workload, traces, policy, out string
	nodes, gpusPerNode, parallel  int
	interval                      time.Duration
	interference, p               float64
	seed                          uint64
	asJSON                        bool
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Replay workloads on a simulated cluster under Pollux, Tiresias or Optimus",
		Long: `sim is the trace-driven testbed: it replays each workload on a simulated
cluster, in simulated time, under the chosen policies and reports average and
99th-percentile JCT, makespan, restarts per job, GPU-hours and the worst
finish-time-fairness ratio, per run and averaged over workloads.

Without --traces it uses the built-in parametric application profiles;
without --workload it draws ` + fmt.Sprint(generatedWorkloads) + ` seeded workloads of 160 jobs over 8 hours.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSim(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.workload, "workload", "", "workload CSV file, or a directory of them (default: generated)")
	fl.StringVar(&f.traces, "traces", "", "trace directory in the artifact layout (default: built-in profiles)")
	fl.StringVar(&f.policy, "policy", "pollux", "pollux, tiresias, optimus or all")
	fl.IntVar(&f.nodes, "nodes", 16, "nodes in the cluster")
	fl.IntVar(&f.gpusPerNode, "gpus-per-node", 4, "GPUs per node")
	fl.DurationVar(&f.interval, "interval", 60*time.Second, "scheduling interval (whole seconds)")
	fl.Float64Var(&f.interference, "interference", 0, "slowdown of a distributed job sharing a node with another, in [0, 1]")
	fl.Float64Var(&f.p, "p", -1, "Pollux fairness exponent of the power mean (1 utilitarian, more negative fairer)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the policies and of generated workloads")
	fl.IntVar(&f.parallel, "parallel", runtime.NumCPU(), "runs to simulate at once")
	fl.StringVar(&f.out, "out", "", "directory for summary.json, jobs.csv and PNG plots")
	fl.BoolVar(&f.asJSON, "json", false, "print exactly one JSON object on stdout")
	return cmd
}

// simRun is one (policy, workload) pair to simulate.
type simRun struct {
	policy string
	wl     workload.Workload
}

func runSim(ctx context.Context, f simFlags, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	policies, err := simPolicyList(f.policy)
	if err != nil {
		return badInput(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode = f.nodes, f.gpusPerNode
	cfg.Interval = f.interval.Seconds()
	cfg.Interference = f.interference
	cfg.Seed = f.seed
	if err := cfg.Validate(); err != nil {
		return badInput(err)
	}
	if math.IsNaN(f.p) || math.IsInf(f.p, 0) {
		return badInput(fmt.Errorf("sim: --p %v: want a finite exponent (0 is the geometric mean)", f.p))
	}
	if f.parallel < 1 {
		return badInput(fmt.Errorf("sim: --parallel %d: want at least 1", f.parallel))
	}
	cat, wls, err := simInputs(f)
	if err != nil {
		return badInput(err)
	}
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return badInput(fmt.Errorf("sim: --out: %w", err))
		}
	}
	var runs []simRun
	total := 0
	for _, p := range policies {
		for _, wl := range wls {
			runs = append(runs, simRun{p, wl})
			total += len(wl.Jobs)
		}
	}
	workers := min(f.parallel, len(runs))
	perRun := max(1, runtime.GOMAXPROCS(0)/workers)
	// The bar redraws in place: draw it only on a terminal, so that logs
	// and test buffers get the final timing line alone.
	tty := false
	if fh, ok := stderr.(*os.File); ok {
		tty = term.IsTerminal(int(fh.Fd()))
	}
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(tty),
		progressbar.OptionSetDescription(fmt.Sprintf("simulating %d runs", len(runs))),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	var (
		doneJobs atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		next     atomic.Int64
	)
	results := make([]*sim.Result, len(runs))
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(runs) {
					return
				}
				r := runs[i]
				last := 0
				progress := func(_ float64, done, _ int) {
					if done > last {
						bar.Set64(doneJobs.Add(int64(done - last)))
						last = done
					}
				}
				pol := simPolicies[r.policy](f.p, perRun)
				res, err := sim.Run(ctx, cfg, cat, r.wl, pol, sim.ModeFor(r.policy), progress)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("sim: %s on %s: %w", r.policy, r.wl.Name, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				results[i] = res
			}
		}()
	}
	wg.Wait()
	_ = bar.Finish()
	if firstErr != nil {
		return firstErr
	}
	elapsed := time.Since(start)
	rounds := 0
	for _, r := range results {
		rounds += r.Rounds
	}
	// Rounds of different runs overlap on the workers: wall time times
	// workers over rounds is the cost of one round on one worker.
	fmt.Fprintf(stderr, "simulated %d runs (%d rounds) in %.1f s on %d workers: %.2f ms per round\n",
		len(runs), rounds, elapsed.Seconds(), workers, 1e3*elapsed.Seconds()*float64(workers)/float64(max(rounds, 1)))
	summary := report.Summarize(results)
	if f.out != "" {
		if err := writeSimOut(f.out, summary, results); err != nil {
			return err
		}
	}
	if f.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(summary)
	}
	return report.PrintTable(stdout, summary)
}

// simPolicyList expands --policy.
func simPolicyList(name string) ([]string, error) {
	if name == "all" {
		var out []string
		for _, p := range simPolicyOrder {
			if _, ok := simPolicies[p]; ok {
				out = append(out, p)
			}
		}
		return out, nil
	}
	if _, ok := simPolicies[name]; !ok {
		known := make([]string, 0, len(simPolicies))
		for p := range simPolicies {
			known = append(known, p)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("sim: unknown policy %q (want %s or all)", name, strings.Join(known, ", "))
	}
	return []string{name}, nil
}

// simInputs loads the application catalog and the workloads.
func simInputs(f simFlags) (testbed.Catalog, []workload.Workload, error) {
	var (
		cat testbed.Catalog
		err error
	)
	if f.traces != "" {
		cat, err = trace.Load(f.traces)
	} else {
		cat, err = builtin.Catalog()
	}
	if err != nil {
		return nil, nil, err
	}
	known := func(app string) bool { _, ok := cat[app]; return ok }
	if f.workload != "" {
		wls, err := workload.Load(f.workload, known)
		return cat, wls, err
	}
	gen := workload.DefaultGenConfig()
	for _, m := range gen.Mix {
		if !known(m.App) {
			return nil, nil, fmt.Errorf("sim: the generated workload needs application %q, absent from %s", m.App, f.traces)
		}
	}
	var wls []workload.Workload
	for i := 0; i < generatedWorkloads; i++ {
		wl, err := workload.Generate(gen, f.seed*1000+uint64(i), fmt.Sprintf("generated-%d", i+1))
		if err != nil {
			return nil, nil, err
		}
		wls = append(wls, wl)
	}
	return cat, wls, nil
}

// writeSimOut writes summary.json, jobs.csv and the plots into dir.
func writeSimOut(dir string, summary report.Summary, results []*sim.Result) error {
	data, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	fh, err := os.Create(filepath.Join(dir, "jobs.csv"))
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := report.WriteJobsCSV(fh, results); err != nil {
		fh.Close()
		return fmt.Errorf("sim: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if _, err := report.WritePlots(dir, results); err != nil {
		return errors.Join(fmt.Errorf("sim: plots"), err)
	}
	return nil
}
