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
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/clusterspec"
	"pollux/testbed/report"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

func init() { subcommands = append(subcommands, newSimCmd) }

// simPolicyOrder is the order runs and tables list policies in.
var simPolicyOrder = []string{"pollux", "pollux-unaware", "sia", "pollux-het", "tiresias", "optimus"}

// simAll is what --policy all runs: on one untyped GPU type the Pollux
// artifact's comparison, on typed clusters Sia's.
func simAll(types int, typed bool) []string {
	switch {
	case types > 1:
		return []string{"pollux-unaware", "sia", "pollux-het"}
	case typed:
		return []string{"pollux", "sia", "pollux-het"}
	}
	return []string{"pollux", "tiresias", "optimus"}
}

// generatedWorkloads is how many workloads `pollux sim` draws when no
// --workload is given.
const generatedWorkloads = 2

type simFlags struct {
	workload, traces, policy, out string
	cluster, semantics            string
	federation                    string
	nodes, gpusPerNode, parallel  int
	interval                      time.Duration
	interference, p               float64
	seed                          uint64
	asJSON, pSet                  bool
	racks                         int
	crossRackRatio                float64
	crossRackModel                string
	compareTopology               bool
	// autoscale runs the elastic-cluster comparison (sim_autoscale.go).
	autoscale bool
	cloud     cloudFlags
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Replay workloads on a simulated cluster under Pollux, Sia, Tiresias or Optimus",
		Long: `sim is the trace-driven testbed: it replays each workload on a simulated
cluster, in simulated time, under the chosen policies and reports average and
99th-percentile JCT, makespan, restarts per job, GPU-hours, contention and
finish-time fairness (worst ratio, fraction of jobs above 1), per run and
averaged over workloads.

Without --traces it uses the built-in parametric application profiles;
without --workload it draws ` + fmt.Sprint(generatedWorkloads) + ` seeded workloads of 160 jobs over 8 hours.

--cluster gives a cluster of GPU types named like the suffixes of Sia's trace
files (placements-TYPE.csv): a preset (hetero: Sia's 6 aws, 2 dgx-ext and 3
rtx nodes; homogeneous: 16 aws nodes), an inline list such as
"aws:6,rtx:3,dgx-ext:2" (TYPE:NODES or TYPE:NODESxGPUS), or a CSV file with the
header gpu_type,nodes,gpus_per_node. With --cluster the simulator follows
Sia's simulator (--semantics sia) unless told otherwise.

--racks R puts the nodes, in order, into R racks of consecutive nodes, and
--cross-rack-ratio X makes synchronising across racks X times slower than
within one. The traces measure only placements within a rack, so the cost
of a placement across racks is put on top of them: with
--cross-rack-model overlap (the default) its step time is scaled by what
the application's throughput model (fitted on its in-rack step times)
predicts with its network terms X times larger, so that communication the
backward pass hid can become exposed; with exposed, only the measured
sync time is paid X times (step + (X - 1) x sync, a lower bound). The
policies see the racks and the ratio (jobs fit their cross-rack cost
once they have run across racks); the summary
reports the fraction of GPU time spent on placements across racks
(cross_rack_gpu_time_frac). --compare-topology runs the one policy given
twice on every workload, aware of the racks and blind to them (the
scheduler before topology, on the same cluster), and reports both.

--federation FILE simulates federated lab clusters instead: every lab of the
file with its own cluster and workload, in three modes (isolated, one merged
cluster, federated with leases), and reports per lab average JCT, worst FTF,
GPU-hours lent and borrowed and reclaim latency. "--federation example" is
the built-in example (testbed/fedsim/example.json: three labs of 16, 32 and
16 GPUs whose busy periods follow each other); with --workload DIR every lab
replays its workload file from DIR (e.g. ../shared/pollux-artifact/workloads
with --traces ../shared/pollux-artifact/traces).

--autoscale simulates an elastic cloud cluster of --gpus-per-node GPU nodes,
between --min-nodes and --max-nodes, nodes joining --boot-delay after they are
asked for and paid --node-cost per node-hour from request to release. It
compares pollux-autoscale (Pollux also choosing the node count by the
artifact's utility rule), throughput-autoscale (Or et al.: grow while
throughput scales) and fixed (--max-nodes throughout) on mean JCT,
node-hours and cost. With --cluster (and --traces with per-type traces) the
cluster has several GPU types: the nodes of --node-gpu-type are added and
released, the other types' nodes are fixed (counted in the sizes and paid
for); pollux-autoscale is then pollux-het deciding the size, fixed is
pollux-het on --max-nodes, and throughput-autoscale is not run. Without --workload it runs the paper's cloud scenario,
one ImageNet job; --out adds timeline.csv and nodes-WORKLOAD.png (see
docs/autoscaling.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.pSet = cmd.Flags().Changed("p")
			if err := checkCloudFlags(f, cmd.Flags().Changed); err != nil {
				return badInput(err)
			}
			if f.autoscale {
				return runSimAutoscale(cmd.Context(), f, cmd.Flags().Changed("policy"), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if f.federation != "" {
				return runSimFederation(cmd.Context(), cmd, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return runSim(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.workload, "workload", "", "workload CSV file, or a directory of them (default: generated)")
	fl.StringVar(&f.traces, "traces", "", "trace directory in the artifact layout (default: built-in profiles)")
	fl.StringVar(&f.policy, "policy", "pollux", "comma-separated policies ("+strings.Join(simPolicyOrder, ", ")+") or all")
	fl.IntVar(&f.nodes, "nodes", 16, "nodes in the cluster (one untyped GPU type; see --cluster)")
	fl.IntVar(&f.gpusPerNode, "gpus-per-node", 4, "GPUs per node (one untyped GPU type; see --cluster)")
	fl.StringVar(&f.cluster, "cluster", "", "GPU types and nodes: a preset (hetero, homogeneous), TYPE:NODES[xGPUS],... or a CSV file")
	fl.StringVar(&f.semantics, "semantics", "auto", "testbed semantics: pollux (the Pollux artifact), sia (Sia's simulator), or auto (sia with --cluster)")
	fl.DurationVar(&f.interval, "interval", 60*time.Second, "scheduling interval (whole seconds)")
	fl.Float64Var(&f.interference, "interference", 0, "slowdown of a distributed job sharing a node with another, in [0, 1]")
	fl.Float64Var(&f.p, "p", -1, "Pollux fairness exponent of the power mean (1 utilitarian, more negative fairer)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the policies and of generated workloads")
	fl.IntVar(&f.parallel, "parallel", runtime.NumCPU(), "runs to simulate at once")
	fl.StringVar(&f.out, "out", "", "directory for summary.json, jobs.csv and PNG plots")
	fl.BoolVar(&f.asJSON, "json", false, "print exactly one JSON object on stdout")
	fl.IntVar(&f.racks, "racks", 1, "racks the nodes are spread over, consecutive nodes in each")
	fl.Float64Var(&f.crossRackRatio, "cross-rack-ratio", optimizer.DefaultCrossRackRatio, "how many times slower synchronising across racks is than within one (>= 1; only with --racks)")
	fl.StringVar(&f.crossRackModel, "cross-rack-model", "overlap", "how a placement across racks is slowed: overlap or exposed (see above)")
	fl.BoolVar(&f.compareTopology, "compare-topology", false, "run the policy aware of the racks and blind to them, and compare (needs --racks of at least 2 and one policy)")
	fl.StringVar(&f.federation, "federation", "", "simulate federated labs described by a JSON file, or "+federationExample+" for the built-in one, isolated, merged and federated (see docs/federation.md)")
	dc := sim.DefaultCloud()
	fl.BoolVar(&f.autoscale, "autoscale", false, "elastic cluster: compare pollux-autoscale, throughput-autoscale and a fixed cluster of --max-nodes on cost and JCT (default workload: the paper's cloud scenario, one ImageNet job)")
	fl.DurationVar(&f.cloud.bootDelay, "boot-delay", time.Duration(dc.BootDelay)*time.Second, "with --autoscale: time from asking for a node to its joining")
	fl.Float64Var(&f.cloud.nodeCost, "node-cost", dc.NodeCost, "with --autoscale: price of one node-hour")
	fl.IntVar(&f.cloud.minNodes, "min-nodes", dc.MinNodes, "with --autoscale: fewest nodes (the cluster starts with max(min-nodes, 1))")
	fl.IntVar(&f.cloud.maxNodes, "max-nodes", dc.MaxNodes, "with --autoscale: most nodes (and the fixed cluster's size)")
	fl.Float64Var(&f.cloud.threshold, "scaling-threshold", optimizer.DefaultScalingThreshold, "with --autoscale: throughput-autoscale adds a node while it adds at least this fraction of linear throughput")
	fl.Float64Var(&f.cloud.lowUtil, "low-util", optimizer.DefaultLowUtil, "with --autoscale: pollux-autoscale keeps the size while utility is at least this")
	fl.Float64Var(&f.cloud.highUtil, "high-util", optimizer.DefaultHighUtil, "with --autoscale: ... and at most this")
	fl.StringVar(&f.cloud.gpuType, "node-gpu-type", "", "with --autoscale --cluster: GPU type of the nodes the cluster adds and releases "+
		"(one of --cluster's, whose GPUs per node it takes; the other types' nodes are fixed; default: the cluster's only type)")
	return cmd
}

// simRun is one (policy, workload) pair to simulate, blind to racks or
// not.
type simRun struct {
	policy string
	wl     workload.Workload
	blind  bool
}

func runSim(ctx context.Context, f simFlags, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cfg := sim.DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode = f.nodes, f.gpusPerNode
	if f.cluster != "" {
		spec, err := clusterspec.Resolve(f.cluster)
		if err != nil {
			return badInput(fmt.Errorf("sim: %w", err))
		}
		cfg.Cluster = spec.Groups
		cfg.Semantics = sim.SiaSemantics
	}
	if f.semantics != "auto" {
		sem, err := sim.ParseSemantics(f.semantics)
		if err != nil {
			return badInput(fmt.Errorf("sim: --semantics: %w", err))
		}
		cfg.Semantics = sem
	}
	policies, err := simPolicyList(f.policy, max(len(cfg.Cluster), 1), f.cluster != "")
	if err != nil {
		return badInput(err)
	}
	cfg.Interval = f.interval.Seconds()
	cfg.Interference = f.interference
	cfg.Seed = f.seed
	cfg.Racks = f.racks
	cfg.CrossRackRatio = f.crossRackRatio
	if cfg.CrossRackModel, err = sim.ParseCrossRackModel(f.crossRackModel); err != nil {
		return badInput(fmt.Errorf("sim: --cross-rack-model: %w", err))
	}
	if err := cfg.Validate(); err != nil {
		return badInput(err)
	}
	if f.racks < 1 || !(f.crossRackRatio >= 1) || math.IsInf(f.crossRackRatio, 0) {
		return badInput(fmt.Errorf("sim: --racks %d, --cross-rack-ratio %v: want at least 1 rack and a finite ratio of at least 1", f.racks, f.crossRackRatio))
	}
	if f.compareTopology && (f.racks < 2 || len(policies) != 1) {
		return badInput(fmt.Errorf("sim: --compare-topology needs --racks of at least 2 (got %d) and exactly one policy (got %s)", f.racks, strings.Join(policies, ", ")))
	}
	if math.IsNaN(f.p) || math.IsInf(f.p, 0) {
		return badInput(fmt.Errorf("sim: --p %v: want a finite exponent (0 is the geometric mean)", f.p))
	}
	if f.parallel < 1 {
		return badInput(fmt.Errorf("sim: --parallel %d: want at least 1", f.parallel))
	}
	cats, wls, err := simInputs(f, cfg)
	if err != nil {
		return badInput(err)
	}
	opts := simPolicyOptions(f)
	opts.ProfiledNodes = profiledNodes(cats)
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return badInput(fmt.Errorf("sim: --out: %w", err))
		}
	}
	var runs []simRun
	total := 0
	for _, p := range policies {
		for _, wl := range wls {
			runs = append(runs, simRun{policy: p, wl: wl})
			total += len(wl.Jobs)
			if f.compareTopology {
				runs = append(runs, simRun{policy: p, wl: wl, blind: true})
				total += len(wl.Jobs)
			}
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
			o := opts
			o.Workers = perRun
			pol, err := optimizer.Lookup(r.policy, o)
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
	err = g.Wait()
	_ = bar.Finish()
	if err != nil {
		return err
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
	if f.compareTopology {
		return writeTopologyComparison(stdout, f, runs, results)
	}
	summary := report.Summarize(results)
	if f.out != "" {
		if err := writeSimOut(f.out, summary, results); err != nil {
			return err
		}
	}
	if f.asJSON {
		return writeJSON(stdout, summary)
	}
	return report.PrintTable(stdout, summary)
}

// simPolicyList expands --policy: comma-separated names of the registry
// (optimizer.Names) or all, on a cluster of types GPU types (typed:
// named by --cluster).
func simPolicyList(arg string, types int, typed bool) ([]string, error) {
	var out []string
	for _, name := range strings.Split(arg, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			for _, p := range simAll(types, typed) {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
			continue
		}
		pol, err := optimizer.Lookup(name, optimizer.Options{})
		switch {
		case errors.Is(err, optimizer.ErrBadAutoscale):
			return nil, fmt.Errorf("sim: policy %s decides the cluster size: run it with --autoscale", name)
		case err != nil:
			return nil, fmt.Errorf("sim: %w, or all", err)
		}
		if _, aware := pol.(optimizer.TypeAware); types > 1 && !aware {
			return nil, fmt.Errorf("sim: policy %s cannot tell GPU types apart and the cluster has %d; use pollux-unaware (Pollux with Sia's heuristic for mixed types) or sia", name, types)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// simPolicyOptions are the registry options of --p: the exponent of the
// Pollux family when it was given (pollux-het has its own default).
func simPolicyOptions(f simFlags) optimizer.Options {
	var o optimizer.Options
	if f.pSet {
		o.PowerMean = &f.p
	}
	return o
}

// simInputs loads the workloads and the traces of every application they
// name on every GPU type of the cluster.
func simInputs(f simFlags, cfg sim.Config) (testbed.TypedCatalog, []workload.Workload, error) {
	typed := len(cfg.Cluster) > 0
	var types []string
	if typed {
		for _, g := range cfg.Cluster {
			types = append(types, g.Type)
		}
	} else {
		types = []string{""}
	}
	if f.traces == "" {
		if typed {
			return nil, nil, fmt.Errorf("sim: --cluster needs --traces with per-type traces (placements-TYPE.csv), e.g. ../shared/sia-artifact/traces")
		}
		cat, err := builtin.Catalog()
		if err != nil {
			return nil, nil, err
		}
		wls, err := simWorkloads(f, func(app string) error {
			if _, ok := cat[app]; !ok {
				return fmt.Errorf("%w %q", workload.ErrUnknownApp, app)
			}
			return nil
		})
		return testbed.TypedCatalog{"": cat}, wls, err
	}
	if _, err := os.Stat(f.traces); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
	}
	if typed {
		if err := checkTraceTypes(f.traces, types); err != nil {
			return nil, nil, err
		}
	}
	check := typedAppCheck(f.traces, types)
	var apps []string
	if f.workload == "" {
		apps = genApps()
	}
	wls, err := simWorkloads(f, check)
	if err != nil {
		return nil, nil, err
	}
	for _, wl := range wls {
		for _, j := range wl.Jobs {
			if !slices.Contains(apps, j.App) {
				apps = append(apps, j.App)
			}
		}
	}
	sort.Strings(apps)
	if !typed {
		// The untyped layout: every application directory is loaded, as
		// before, so that bad trace files anywhere are reported.
		cat, err := trace.Load(f.traces)
		if err != nil {
			return nil, nil, err
		}
		return testbed.TypedCatalog{"": cat}, wls, nil
	}
	cats, err := trace.LoadTyped(f.traces, types, apps)
	return cats, wls, err
}

// typedAppCheck is the check of a workload's application against the
// per-type traces in dir: it must have traces for every type of types.
func typedAppCheck(dir string, types []string) func(string) error {
	return func(app string) error {
		have, err := trace.Types(filepath.Join(dir, app))
		if err != nil || len(have) == 0 {
			return fmt.Errorf("%w %q: no trace directory %s with a placements file", workload.ErrUnknownApp, app, filepath.Join(dir, app))
		}
		for _, t := range types {
			if !slices.Contains(have, t) {
				if t == "" {
					return fmt.Errorf("%w %q: its traces are per GPU type (%s) and the cluster is untyped; give --cluster", workload.ErrUnknownApp, app, strings.Join(have, ", "))
				}
				return fmt.Errorf("%w %q: no traces for GPU type %s in %s (it has %s)", workload.ErrUnknownApp, app, t, filepath.Join(dir, app), describe(have))
			}
		}
		return nil
	}
}

// checkTraceTypes refuses a cluster GPU type that no application has
// traces for.
func checkTraceTypes(dir string, types []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
	}
	found := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		have, err := trace.Types(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, t := range have {
			found[t] = true
		}
	}
	for _, t := range types {
		if !found[t] {
			return fmt.Errorf("sim: --cluster: GPU type %q has no traces in %s (no application has placements-%s.csv)", t, dir, t)
		}
	}
	return nil
}

func describe(types []string) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t
		if t == "" {
			names[i] = "untyped traces"
		}
	}
	return strings.Join(names, ", ")
}

// genApps are the applications the generated workloads draw from.
func genApps() []string {
	var apps []string
	for _, m := range workload.DefaultGenConfig().Mix {
		apps = append(apps, m.App)
	}
	return apps
}

// simWorkloads reads --workload (checking every job's application) or
// draws the generated workloads, whose applications must all pass check.
func simWorkloads(f simFlags, check func(string) error) ([]workload.Workload, error) {
	if f.workload != "" {
		return workload.LoadChecked(f.workload, check)
	}
	gen := workload.DefaultGenConfig()
	for _, m := range gen.Mix {
		if err := check(m.App); err != nil {
			return nil, fmt.Errorf("sim: the generated workload needs application %q: %w", m.App, err)
		}
	}
	var wls []workload.Workload
	for i := 0; i < generatedWorkloads; i++ {
		wl, err := workload.Generate(gen, f.seed*1000+uint64(i), fmt.Sprintf("generated-%d", i+1))
		if err != nil {
			return nil, err
		}
		wls = append(wls, wl)
	}
	return wls, nil
}

// profiledNodes is, per GPU type, the most nodes its traces span.
func profiledNodes(cats testbed.TypedCatalog) map[string]int {
	out := map[string]int{}
	for t, cat := range cats {
		for _, app := range cat {
			if tp, ok := app.(testbed.TypeProfile); ok {
				out[t] = max(out[t], tp.ProfiledNodes())
			}
		}
	}
	return out
}

// writeSimOut writes summary.json, jobs.csv, the plots and index.html (a
// page comparing the policies, the plots embedded) into dir.
func writeSimOut(dir string, summary report.Summary, results []*sim.Result) error {
	if err := writeSummaryAndJobs(dir, summary, results); err != nil {
		return err
	}
	files, err := report.WritePlots(dir, results)
	if err != nil {
		return errors.Join(fmt.Errorf("sim: plots"), err)
	}
	var policies, workloads []string
	for _, r := range summary.Runs {
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	note := fmt.Sprintf("pollux sim: %d runs, policies %s on workloads %s.", len(summary.Runs), strings.Join(policies, ", "), strings.Join(workloads, ", "))
	page := report.Page{Title: "Pollux simulator: policies compared", Note: note, Tables: report.SummaryTables(summary), Plots: report.Plots(files)}
	if err := report.WriteIndex(dir, page); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// writeSummaryAndJobs writes summary (as summary.json) and the jobs of
// results (as jobs.csv) into dir: what every `pollux sim --out` writes.
func writeSummaryAndJobs(dir string, summary any, results []*sim.Result) error {
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
	return nil
}

// topologyComparison is what `pollux sim --compare-topology --json`
// prints: the policy aware of the racks and blind to them, each averaged
// over the workloads.
type topologyComparison struct {
	Policy         string               `json:"policy"`
	Racks          int                  `json:"racks"`
	CrossRackRatio float64              `json:"cross_rack_ratio"`
	CrossRackModel string               `json:"cross_rack_model"`
	Workloads      int                  `json:"workloads"`
	RackAware      report.PolicySummary `json:"rack_aware"`
	RackBlind      report.PolicySummary `json:"rack_blind"`
	// AvgJCTReduction is 1 - rack-aware mean average JCT / rack-blind's.
	AvgJCTReduction float64 `json:"avg_jct_reduction"`
	// Runs are the per-workload figures, rack-aware then rack-blind.
	Runs []topologyRun `json:"runs"`
}

type topologyRun struct {
	Workload             string  `json:"workload"`
	RackAware            bool    `json:"rack_aware"`
	AvgJCT               float64 `json:"avg_jct"`
	CrossRackGPUTimeFrac float64 `json:"cross_rack_gpu_time_frac"`
	RestartsPerJob       float64 `json:"restarts_per_job"`
}

// writeTopologyComparison reports the runs of --compare-topology.
func writeTopologyComparison(w io.Writer, f simFlags, runs []simRun, results []*sim.Result) error {
	var aware, blind []*sim.Result
	out := topologyComparison{Policy: runs[0].policy, Racks: f.racks, CrossRackRatio: f.crossRackRatio, CrossRackModel: f.crossRackModel}
	for i, r := range runs {
		if r.blind {
			blind = append(blind, results[i])
		} else {
			aware = append(aware, results[i])
		}
		m := results[i].Metrics
		out.Runs = append(out.Runs, topologyRun{Workload: r.wl.Name, RackAware: !r.blind, AvgJCT: m.AvgJCT,
			CrossRackGPUTimeFrac: m.CrossRackGPUTimeFrac, RestartsPerJob: m.RestartsPerJob})
	}
	out.RackAware = report.Summarize(aware).Policies[out.Policy]
	out.RackBlind = report.Summarize(blind).Policies[out.Policy]
	out.Workloads = len(aware)
	if out.RackBlind.MeanAvgJCT > 0 {
		out.AvgJCTReduction = 1 - out.RackAware.MeanAvgJCT/out.RackBlind.MeanAvgJCT
	}
	if f.asJSON {
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s on %d racks, cross-rack ratio %g\tmean avg JCT s\tcross-rack GPU time\trestarts/job\t\n", out.Policy, out.Racks, out.CrossRackRatio)
	for _, row := range []struct {
		name string
		ps   report.PolicySummary
	}{{"rack-aware", out.RackAware}, {"rack-blind", out.RackBlind}} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f %%\t%.2f\t\n", row.name, row.ps.MeanAvgJCT, 100*row.ps.CrossRackGPUTimeFrac, row.ps.MeanRestartsPerJob)
	}
	fmt.Fprintf(tw, "rack-aware below rack-blind\t%.1f %%\t\t\t\n", 100*out.AvgJCTReduction)
	return tw.Flush()
}
