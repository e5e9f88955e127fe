package simrun

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/clusterspec"
	"pollux/testbed/report"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

// CloudOptions are a comparison of autoscaling policies on an elastic
// cloud cluster (the flags of `pollux sim --autoscale`).
type CloudOptions struct {
	// Workload ("": the paper's cloud scenario), Traces, Cluster, Out,
	// GPUsPerNode, Interval, P, Seed, Parallel and JSON are Options'.
	Workload, Traces, Cluster, Out string
	GPUsPerNode, Parallel          int
	Interval                       time.Duration
	P                              float64
	Seed                           uint64
	JSON                           bool
	// The elastic cluster: nodes joining BootDelay after they are asked
	// for, paid NodeCost per node-hour, between MinNodes and MaxNodes; on
	// a cluster of GPU types the nodes of GPUType are added and released.
	BootDelay          time.Duration
	NodeCost           float64
	MinNodes, MaxNodes int
	GPUType            string
	// Threshold, LowUtil and HighUtil are the autoscalers' settings,
	// checked here (the caller's policies use them).
	Threshold, LowUtil, HighUtil float64
	// Policies expands the policies to run (typed: on a cluster of
	// several GPU types); its error is bad input.
	Policies func(typed bool) ([]string, error)
	// NewPolicy builds a fresh policy for one run, which may use workers
	// goroutines, adding nodes like tmpl.
	NewPolicy func(name string, workers int, tmpl optimizer.Node, typed bool) (optimizer.Policy, error)
}

// cloudPolicyResult is one policy's figures in `pollux sim --autoscale
// --json`, averaged over the workloads.
type cloudPolicyResult struct {
	JCT       float64 `json:"jct_s"`
	NodeHours float64 `json:"node_hours"`
	Cost      float64 `json:"cost"`
	Makespan  float64 `json:"makespan_s"`
	PeakNodes float64 `json:"peak_nodes"`
	MeanNodes float64 `json:"mean_nodes"`
	Restarts  float64 `json:"restarts_per_job"`
	Jobs      int     `json:"jobs"`
	Workloads int     `json:"workloads"`
}

// cloudSummary is the JSON `pollux sim --autoscale --json` prints.
type cloudSummary struct {
	Policies map[string]cloudPolicyResult `json:"policies"`
}

// check refuses values an elastic cluster cannot honour.
func (o CloudOptions) check() error {
	switch {
	case o.GPUType != "" && o.Cluster == "":
		return usage.Errorf("sim: --node-gpu-type %s needs --cluster (an elastic cluster without it is untyped)", o.GPUType)
	case o.MinNodes < 0:
		return usage.Errorf("sim: --min-nodes %d: want at least 0", o.MinNodes)
	case o.MaxNodes < 1 || o.MaxNodes > 1<<16:
		return usage.Errorf("sim: --max-nodes %d: want 1..65536", o.MaxNodes)
	case o.MinNodes > o.MaxNodes:
		return usage.Errorf("sim: --min-nodes %d is above --max-nodes %d", o.MinNodes, o.MaxNodes)
	case o.BootDelay < 0:
		return usage.Errorf("sim: --boot-delay %v: want a duration >= 0", o.BootDelay)
	case !(o.NodeCost >= 0) || math.IsInf(o.NodeCost, 0):
		return usage.Errorf("sim: --node-cost %v: want a finite price per node-hour >= 0", o.NodeCost)
	case !(o.Threshold > 0 && o.Threshold <= 1):
		return usage.Errorf("sim: --scaling-threshold %v: want a fraction of linear scaling in (0, 1]", o.Threshold)
	case !(o.LowUtil > 0 && o.LowUtil <= o.HighUtil && o.HighUtil <= 1):
		return usage.Errorf("sim: --low-util %v and --high-util %v: want 0 < low <= high <= 1", o.LowUtil, o.HighUtil)
	}
	return nil
}

// cloudTemplate is the node an elastic cluster of groups adds (the
// group of GPU type typ, or the only one), and the nodes of the other
// groups, which stay.
func cloudTemplate(groups []clusterspec.Group, typ string) (optimizer.Node, int, error) {
	var types []string
	for _, g := range groups {
		types = append(types, g.Type)
	}
	if typ == "" {
		if len(groups) > 1 {
			return optimizer.Node{}, 0, fmt.Errorf("sim: --autoscale on a cluster of several GPU types (%s) needs --node-gpu-type: the type of the nodes it adds", strings.Join(types, ", "))
		}
		typ = groups[0].Type
	}
	i := slices.Index(types, typ)
	if i < 0 {
		return optimizer.Node{}, 0, fmt.Errorf("sim: --node-gpu-type %s is not a GPU type of --cluster (%s)", typ, strings.Join(types, ", "))
	}
	fixed := 0
	for j, g := range groups {
		if j != i {
			fixed += g.Nodes
		}
	}
	return optimizer.Node{GPUs: groups[i].GPUsPerNode, Type: typ}, fixed, nil
}

// cloudInputs loads the applications (built-in profiles or --traces; on
// a cluster of GPU types, the per-type traces of every type of
// cluster) and the workloads (--workload, or the built-in cloud
// scenario).
func cloudInputs(o CloudOptions, cluster []clusterspec.Group) (testbed.TypedCatalog, []workload.Workload, error) {
	var types []string
	for _, g := range cluster {
		types = append(types, g.Type)
	}
	var cat testbed.Catalog
	var check func(app string) error
	switch {
	case len(types) > 0 && o.Traces == "":
		return nil, nil, fmt.Errorf("sim: --cluster needs --traces with per-type traces (placements-TYPE.csv), e.g. ../shared/sia-artifact/traces")
	case len(types) > 0:
		if err := checkTraceTypes(o.Traces, types); err != nil {
			return nil, nil, err
		}
		check = typedAppCheck(o.Traces, types)
	case o.Traces == "":
		c, err := builtin.Catalog()
		if err != nil {
			return nil, nil, err
		}
		cat = c
	default:
		if _, err := os.Stat(o.Traces); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
		}
		c, err := trace.Load(o.Traces)
		if err != nil {
			return nil, nil, err
		}
		cat = c
	}
	if check == nil {
		check = func(app string) error {
			if _, ok := cat[app]; !ok {
				where := "the built-in profiles"
				if o.Traces != "" {
					where = o.Traces
				}
				return fmt.Errorf("%w %q: not in %s", workload.ErrUnknownApp, app, where)
			}
			return nil
		}
	}
	var wls []workload.Workload
	if o.Workload != "" {
		var err error
		if wls, err = workload.LoadChecked(o.Workload, check); err != nil {
			return nil, nil, err
		}
	} else {
		wl := sim.CloudScenario()
		for _, j := range wl.Jobs {
			if err := check(j.App); err != nil {
				return nil, nil, fmt.Errorf("sim: the cloud scenario needs application %q: %w", j.App, err)
			}
		}
		wls = []workload.Workload{wl}
	}
	if len(types) == 0 {
		return testbed.TypedCatalog{"": cat}, wls, nil
	}
	var apps []string
	for _, wl := range wls {
		for _, j := range wl.Jobs {
			if !slices.Contains(apps, j.App) {
				apps = append(apps, j.App)
			}
		}
	}
	slices.Sort(apps)
	cats, err := trace.LoadTyped(o.Traces, types, apps)
	return cats, wls, err
}

// Cloud is `pollux sim --autoscale`: every workload on an elastic
// cluster under Pollux deciding the size, the throughput-based
// autoscaler and a fixed cluster of the maximum size (as the caller's
// policies do).
func Cloud(ctx context.Context, o CloudOptions, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := o.check(); err != nil {
		return err
	}
	base, tmpl, policies, err := o.config()
	if err != nil {
		return err
	}
	cats, wls, err := cloudInputs(o, base.Cluster)
	if err != nil {
		return usage.Wrap(err)
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return usage.Errorf("sim: --out: %w", err)
		}
	}
	var runs []runSpec
	for _, p := range policies {
		for _, wl := range wls {
			runs = append(runs, runSpec{policy: p, wl: wl})
		}
	}
	results, err := o.simulate(ctx, base, cats, runs, tmpl, stderr)
	if err != nil {
		return err
	}
	summary := summarizeCloud(results)
	if o.Out != "" {
		if err := writeCloudOut(o.Out, summary, results); err != nil {
			return err
		}
	}
	if o.JSON {
		return jsonout.Write(stdout, summary)
	}
	return printCloudTable(stdout, policies, summary)
}

// config is the simulator's configuration of the elastic cluster, the
// node it adds and the policies to run.
func (o CloudOptions) config() (sim.Config, optimizer.Node, []string, error) {
	base := sim.DefaultConfig()
	tmpl := optimizer.Node{GPUs: o.GPUsPerNode}
	fixed := 0
	if o.Cluster != "" {
		spec, err := clusterspec.Resolve(o.Cluster)
		if err != nil {
			return base, tmpl, nil, usage.Errorf("sim: %w", err)
		}
		base.Cluster, base.Semantics = spec.Groups, sim.SiaSemantics
		if tmpl, fixed, err = cloudTemplate(spec.Groups, o.GPUType); err != nil {
			return base, tmpl, nil, usage.Wrap(err)
		}
		if fixed > o.MaxNodes {
			return base, tmpl, nil, usage.Errorf("sim: --cluster has %d nodes of GPU types other than %s, always there: more than --max-nodes %d", fixed, tmpl.Type, o.MaxNodes)
		}
	}
	policies, err := o.Policies(len(base.Cluster) > 1)
	if err != nil {
		return base, tmpl, nil, usage.Wrap(err)
	}
	if err := checkP(o.P, o.Parallel); err != nil {
		return base, tmpl, nil, err
	}
	base.GPUsPerNode = o.GPUsPerNode
	base.Interval = o.Interval.Seconds()
	base.Seed = o.Seed
	base.Cloud = &sim.Cloud{
		MinNodes: o.MinNodes, MaxNodes: o.MaxNodes,
		InitialNodes: max(o.MinNodes, fixed, 1),
		BootDelay:    o.BootDelay.Seconds(), NodeCost: o.NodeCost, GPUType: tmpl.Type,
	}
	if err := base.Validate(); err != nil {
		return base, tmpl, nil, usage.Errorf("sim: %w", err)
	}
	return base, tmpl, policies, nil
}

// simulate runs the runs, Parallel at once, a line on stderr as each
// ends; the fixed policy's cluster starts at its maximum size.
func (o CloudOptions) simulate(ctx context.Context, base sim.Config, cats testbed.TypedCatalog, runs []runSpec, tmpl optimizer.Node,
	stderr io.Writer) ([]*sim.Result, error) {
	typed := len(base.Cluster) > 1
	workers := min(o.Parallel, len(runs))
	perRun := max(1, min(2, o.Parallel/workers))
	results := make([]*sim.Result, len(runs))
	var mu sync.Mutex // the progress lines
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, r := range runs {
		g.Go(func() error {
			cfg := base
			cloud := *base.Cloud
			if r.policy == "fixed" {
				cloud.InitialNodes = cloud.MaxNodes
			}
			cfg.Cloud = &cloud
			pol, err := o.NewPolicy(r.policy, perRun, tmpl, typed)
			if err != nil {
				return fmt.Errorf("sim: %s: %w", r.policy, err)
			}
			res, err := sim.RunTyped(gctx, cfg, cats, r.wl, pol, sim.ModeFor(r.policy), nil)
			if err != nil {
				return fmt.Errorf("sim: %s on %s: %w", r.policy, r.wl.Name, err)
			}
			res.Policy = r.policy
			results[i] = res
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(stderr, "%s on %s: mean JCT %.2f h, %.1f node-hours, cost %.2f (%.1f s)\n",
				r.policy, r.wl.Name, res.Metrics.AvgJCT/3600, res.Cloud.NodeHours, res.Cloud.Cost, time.Since(start).Seconds())
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return results, nil
}

// summarizeCloud averages every policy's figures over its workloads.
func summarizeCloud(results []*sim.Result) cloudSummary {
	sum := cloudSummary{Policies: map[string]cloudPolicyResult{}}
	for _, r := range results {
		p := sum.Policies[r.Policy]
		p.JCT += r.Metrics.AvgJCT
		p.NodeHours += r.Cloud.NodeHours
		p.Cost += r.Cloud.Cost
		p.Makespan += r.Metrics.Makespan
		p.PeakNodes += float64(r.Cloud.PeakNodes)
		p.MeanNodes += r.Cloud.MeanNodes
		p.Restarts += r.Metrics.RestartsPerJob
		p.Jobs += len(r.Jobs)
		p.Workloads++
		sum.Policies[r.Policy] = p
	}
	for name, p := range sum.Policies {
		n := float64(p.Workloads)
		p.JCT /= n
		p.NodeHours /= n
		p.Cost /= n
		p.Makespan /= n
		p.PeakNodes /= n
		p.MeanNodes /= n
		p.Restarts /= n
		sum.Policies[name] = p
	}
	return sum
}

// printCloudTable prints the comparison and, when both ran, Pollux against
// the throughput-based autoscaler.
func printCloudTable(w io.Writer, policies []string, s cloudSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tmean JCT (h)\tnode-hours\tcost\tpeak nodes\tmean nodes\trestarts/job\t")
	for _, name := range policies {
		p := s.Policies[name]
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%.2f\t%.1f\t%.2f\t%.1f\t\n", name, p.JCT/3600, p.NodeHours, p.Cost, p.PeakNodes, p.MeanNodes, p.Restarts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pa, okA := s.Policies["pollux-autoscale"]
	th, okT := s.Policies["throughput-autoscale"]
	if okA && okT && th.Cost > 0 && th.JCT > 0 {
		fmt.Fprintf(w, "pollux-autoscale against throughput-autoscale: cost %+.1f %%, mean JCT %+.1f %%\n",
			100*(pa.Cost/th.Cost-1), 100*(pa.JCT/th.JCT-1))
	}
	return nil
}

// writeCloudOut writes summary.json, jobs.csv, timeline.csv, the
// node-count and efficiency plots and index.html (the policies compared,
// the plots embedded) into dir.
func writeCloudOut(dir string, summary cloudSummary, results []*sim.Result) error {
	if err := writeSummaryAndJobs(dir, summary, results); err != nil {
		return err
	}
	if err := writeTimelineCSV(filepath.Join(dir, "timeline.csv"), results); err != nil {
		return err
	}
	files, err := report.WriteCloudPlots(dir, results)
	if err != nil {
		return fmt.Errorf("sim: plots: %w", err)
	}
	var policies []string
	for _, r := range results {
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
	}
	t := report.Table{ID: "policies", Caption: "Mean over workloads, per policy",
		Header: []string{"policy", "mean JCT (h)", "node-hours", "cost", "peak nodes", "mean nodes", "restarts/job"}}
	for _, name := range policies {
		p := summary.Policies[name]
		t.Rows = append(t.Rows, []string{name, fmt.Sprintf("%.2f", p.JCT/3600), fmt.Sprintf("%.1f", p.NodeHours), fmt.Sprintf("%.2f", p.Cost),
			fmt.Sprintf("%.1f", p.PeakNodes), fmt.Sprintf("%.2f", p.MeanNodes), fmt.Sprintf("%.1f", p.Restarts)})
	}
	page := report.Page{Title: "Pollux simulator: an elastic cluster, autoscaling policies compared",
		Note:   fmt.Sprintf("pollux sim --autoscale: %d runs, policies %s.", len(results), strings.Join(policies, ", ")),
		Tables: []report.Table{t}, Plots: report.Plots(files)}
	if err := report.WriteIndex(dir, page); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// writeTimelineCSV writes every run's cluster after each round: nodes
// paid for, GPUs allocated, active jobs, mean batch and mean statistical
// efficiency of the running jobs.
func writeTimelineCSV(path string, results []*sim.Result) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	w := csv.NewWriter(fh)
	_ = w.Write([]string{"workload", "policy", "time_s", "nodes", "gpus", "active_jobs", "mean_batch", "efficiency"})
	for _, r := range results {
		for _, s := range r.Timeline {
			_ = w.Write([]string{r.Workload, r.Policy, strconv.FormatFloat(s.Time, 'f', -1, 64), strconv.Itoa(s.Nodes),
				strconv.Itoa(s.GPUs), strconv.Itoa(s.Active), strconv.FormatFloat(s.MeanBatch, 'f', 1, 64), strconv.FormatFloat(s.Efficiency, 'f', 4, 64)})
		}
	}
	w.Flush()
	if err := errors.Join(w.Error(), fh.Close()); err != nil {
		return fmt.Errorf("sim: %s: %w", path, err)
	}
	return nil
}
