package simrun

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/clusterspec"
	"pollux/testbed/report"
	"pollux/testbed/sim"
	"pollux/testbed/workload"
)

// GeneratedWorkloads is how many workloads Run draws when no Workload is
// given.
const GeneratedWorkloads = 2

// Options are a comparison of policies on a fixed cluster (the flags of
// `pollux sim`).
type Options struct {
	// Workload is a workload CSV file or a directory of them ("":
	// generated); Traces a trace directory ("": the built-in profiles).
	Workload, Traces string
	// Cluster names GPU types and nodes (clusterspec.Resolve; "": Nodes
	// untyped nodes of GPUsPerNode GPUs); Semantics is "auto" (sia with
	// Cluster) or a sim semantics.
	Cluster, Semantics string
	Nodes, GPUsPerNode int
	Interval           time.Duration
	Interference       float64
	P                  float64 // the Pollux fairness exponent, checked here
	Seed               uint64
	Parallel           int    // runs at once
	Out                string // directory for the files and plots ("": none)
	// GroundTruth is a file of the Sia artifact's own runs whose sweep
	// points are drawn beside ours (report.ReadGroundTruth; "": none).
	GroundTruth string
	JSON        bool
	// Racks of consecutive nodes, their uplinks Oversubscription times
	// below their nodes' links of NodeBandwidth Gbit/s (0: the fabric
	// package's default); the network across racks is the simulator's
	// alone (package fabric): no policy is told it.
	Racks            int
	Oversubscription float64
	NodeBandwidth    float64
	CompareTopology  bool
	// Policies expands the policies to run on a cluster of types GPU
	// types (typed: named by Cluster); its error is bad input.
	Policies func(types int, typed bool) ([]string, error)
	// PolicyOptions are the registry options every run's policy is
	// looked up with (optimizer.Lookup); Workers and ProfiledNodes are
	// set here.
	PolicyOptions optimizer.Options
}

// runSpec is one (policy, workload) pair to simulate, blind to racks or
// not.
type runSpec struct {
	policy string
	wl     workload.Workload
	blind  bool
}

// Run replays every workload under every policy and prints the
// comparison on stdout (timing on stderr).
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg, policies, err := o.config()
	if err != nil {
		return err
	}
	cats, wls, err := simInputs(o, cfg)
	if err != nil {
		return usage.Wrap(err)
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return usage.Errorf("sim: --out: %w", err)
		}
	}
	refs, err := o.groundTruth()
	if err != nil {
		return err
	}
	var runs []runSpec
	for _, p := range policies {
		for _, wl := range wls {
			runs = append(runs, runSpec{policy: p, wl: wl})
			if o.CompareTopology {
				runs = append(runs, runSpec{policy: p, wl: wl, blind: true})
			}
		}
	}
	results, err := o.simulate(ctx, cfg, cats, runs, stderr)
	if err != nil {
		return err
	}
	if o.CompareTopology {
		return writeTopologyComparison(stdout, o, runs, results)
	}
	summary := report.Summarize(results)
	if o.Out != "" {
		if err := writeSimOut(o.Out, summary, results, refs); err != nil {
			return err
		}
	}
	if o.JSON {
		return jsonout.Write(stdout, summary)
	}
	return report.PrintTable(stdout, summary)
}

// config is the simulator's configuration and the policies to run, the
// options checked.
func (o Options) config() (sim.Config, []string, error) {
	cfg := sim.DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode = o.Nodes, o.GPUsPerNode
	if o.Cluster != "" {
		spec, err := clusterspec.Resolve(o.Cluster)
		if err != nil {
			return cfg, nil, usage.Errorf("sim: %w", err)
		}
		cfg.Cluster = spec.Groups
		cfg.Semantics = sim.SiaSemantics
	}
	if o.Semantics != "auto" {
		sem, err := sim.ParseSemantics(o.Semantics)
		if err != nil {
			return cfg, nil, usage.Errorf("sim: --semantics: %w", err)
		}
		cfg.Semantics = sem
	}
	policies, err := o.Policies(max(len(cfg.Cluster), 1), o.Cluster != "")
	if err != nil {
		return cfg, nil, usage.Wrap(err)
	}
	cfg.Interval = o.Interval.Seconds()
	cfg.Interference = o.Interference
	cfg.Seed = o.Seed
	cfg.Racks = o.Racks
	if o.Racks < 1 || !(o.Oversubscription >= 1) || math.IsInf(o.Oversubscription, 0) || !(o.NodeBandwidth >= 0) || math.IsInf(o.NodeBandwidth, 0) {
		return cfg, nil, usage.Errorf("sim: --racks %d, --oversubscription %v, --node-bandwidth %v: want at least 1 rack, a finite ratio of at least 1 and a finite bandwidth (0: the default)",
			o.Racks, o.Oversubscription, o.NodeBandwidth)
	}
	cfg.Oversubscription, cfg.NodeBandwidth = o.Oversubscription, o.NodeBandwidth*1e9/8
	if err := cfg.Validate(); err != nil {
		return cfg, nil, usage.Wrap(err)
	}
	if o.CompareTopology && (o.Racks < 2 || len(policies) != 1) {
		return cfg, nil, usage.Errorf("sim: --compare-topology needs --racks of at least 2 (got %d) and exactly one policy (got %s)", o.Racks, strings.Join(policies, ", "))
	}
	if err := checkP(o.P, o.Parallel); err != nil {
		return cfg, nil, err
	}
	return cfg, policies, nil
}

// checkP checks the fairness exponent and the runs at once.
func checkP(p float64, parallel int) error {
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return usage.Errorf("sim: --p %v: want a finite exponent (0 is the geometric mean)", p)
	}
	if parallel < 1 {
		return usage.Errorf("sim: --parallel %d: want at least 1", parallel)
	}
	return nil
}

// simulate runs the runs, Parallel at once, with a progress bar on
// stderr when it is a terminal and the timing after.
func (o Options) simulate(ctx context.Context, cfg sim.Config, cats testbed.TypedCatalog, runs []runSpec, stderr io.Writer) ([]*sim.Result, error) {
	total := 0
	for _, r := range runs {
		total += len(r.wl.Jobs)
	}
	popts := o.PolicyOptions
	popts.ProfiledNodes = cats.ProfiledNodes()
	workers := min(o.Parallel, len(runs))
	popts.Workers = max(1, runtime.GOMAXPROCS(0)/workers)
	bar := progressBar(stderr, total, len(runs))
	var doneJobs atomic.Int64
	results := make([]*sim.Result, len(runs))
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, r := range runs {
		g.Go(func() error {
			last := 0
			progress := func(_ float64, done, _ int) {
				if done > last {
					bar.Set64(doneJobs.Add(int64(done - last)))
					last = done
				}
			}
			pol, err := optimizer.Lookup(r.policy, popts)
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			rcfg := cfg
			rcfg.RackBlind = r.blind
			res, err := sim.RunTyped(gctx, rcfg, cats, r.wl, pol, sim.ModeFor(r.policy), progress)
			if err != nil {
				return fmt.Errorf("sim: %s on %s: %w", r.policy, r.wl.Name, err)
			}
			results[i] = res
			return nil
		})
	}
	err := g.Wait()
	_ = bar.Finish()
	if err != nil {
		return nil, err
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
	return results, nil
}

// progressBar counts the completed jobs of runs runs. It redraws in
// place: it is drawn only on a terminal, so that logs and test buffers
// get the final timing line alone.
func progressBar(stderr io.Writer, total, runs int) *progressbar.ProgressBar {
	tty := false
	if fh, ok := stderr.(*os.File); ok {
		tty = term.IsTerminal(int(fh.Fd()))
	}
	return progressbar.NewOptions(total,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetVisibility(tty),
		progressbar.OptionSetDescription(fmt.Sprintf("simulating %d runs", runs)),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// groundTruth reads o.GroundTruth (nil without one); a file that cannot
// be read or decoded is bad input.
func (o Options) groundTruth() ([]report.RefPoint, error) {
	if o.GroundTruth == "" {
		return nil, nil
	}
	if o.Out == "" {
		return nil, usage.Errorf("sim: --ground-truth draws beside the plots of --out, and there is no --out")
	}
	fh, err := os.Open(o.GroundTruth)
	if err != nil {
		return nil, usage.Errorf("sim: --ground-truth: %w", err)
	}
	defer fh.Close()
	refs, err := report.ReadGroundTruth(fh)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	return refs, nil
}
