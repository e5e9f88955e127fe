package main

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

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/clusterspec"
	"pollux/testbed/report"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

// cloudPolicies are the policies `pollux sim --autoscale` compares, in
// the order it lists them.
var cloudPolicies = []string{"pollux-autoscale", "throughput-autoscale", "fixed"}

// cloudFlags are the flags of `pollux sim --autoscale`.
type cloudFlags struct {
	bootDelay          time.Duration
	nodeCost           float64
	minNodes, maxNodes int
	threshold          float64
	lowUtil, highUtil  float64
	gpuType            string
}

// cloudOnlyFlags may only be given with --autoscale.
var cloudOnlyFlags = []string{"boot-delay", "node-cost", "min-nodes", "max-nodes", "scaling-threshold", "low-util", "high-util", "node-gpu-type"}

// fixedOnlyFlags describe a fixed cluster and are refused with --autoscale.
var fixedOnlyFlags = []struct{ name, why string }{
	{"nodes", "the elastic cluster's size is bounded by --min-nodes and --max-nodes"},
	{"semantics", "an elastic cluster follows the Pollux artifact's testbed, or Sia's simulator with --cluster"},
	{"interference", "interference is not modelled on an elastic cluster"},
	{"racks", "an elastic cluster has one rack"},
	{"cross-rack-ratio", "an elastic cluster has one rack"},
	{"cross-rack-model", "an elastic cluster has one rack"},
	{"compare-topology", "an elastic cluster has one rack"},
	{"federation", "federated labs are a separate simulation"},
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

// checkCloudFlags refuses flag combinations --autoscale cannot honour, and
// autoscaling flags without it.
func checkCloudFlags(f simFlags, changed func(string) bool) error {
	if !f.autoscale {
		for _, name := range cloudOnlyFlags {
			if changed(name) {
				return fmt.Errorf("sim: --%s needs --autoscale", name)
			}
		}
		return nil
	}
	for _, fl := range fixedOnlyFlags {
		if changed(fl.name) {
			return fmt.Errorf("sim: --%s cannot be used with --autoscale: %s", fl.name, fl.why)
		}
	}
	c := f.cloud
	switch {
	case c.gpuType != "" && f.cluster == "":
		return fmt.Errorf("sim: --node-gpu-type %s needs --cluster (an elastic cluster without it is untyped)", c.gpuType)
	case c.minNodes < 0:
		return fmt.Errorf("sim: --min-nodes %d: want at least 0", c.minNodes)
	case c.maxNodes < 1 || c.maxNodes > 1<<16:
		return fmt.Errorf("sim: --max-nodes %d: want 1..65536", c.maxNodes)
	case c.minNodes > c.maxNodes:
		return fmt.Errorf("sim: --min-nodes %d is above --max-nodes %d", c.minNodes, c.maxNodes)
	case c.bootDelay < 0:
		return fmt.Errorf("sim: --boot-delay %v: want a duration >= 0", c.bootDelay)
	case !(c.nodeCost >= 0) || math.IsInf(c.nodeCost, 0):
		return fmt.Errorf("sim: --node-cost %v: want a finite price per node-hour >= 0", c.nodeCost)
	case !(c.threshold > 0 && c.threshold <= 1):
		return fmt.Errorf("sim: --scaling-threshold %v: want a fraction of linear scaling in (0, 1]", c.threshold)
	case !(c.lowUtil > 0 && c.lowUtil <= c.highUtil && c.highUtil <= 1):
		return fmt.Errorf("sim: --low-util %v and --high-util %v: want 0 < low <= high <= 1", c.lowUtil, c.highUtil)
	}
	return nil
}

// cloudPolicyList expands --policy for --autoscale (all three when the
// flag was not given; on a cluster of several GPU types, all but the
// type-blind throughput-autoscale).
func cloudPolicyList(arg string, given, typed bool) ([]string, error) {
	known := cloudPolicies
	if typed {
		known = slices.DeleteFunc(slices.Clone(cloudPolicies), func(p string) bool { return p == "throughput-autoscale" })
	}
	if !given {
		return known, nil
	}
	var out []string
	for _, name := range strings.Split(arg, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "all":
			for _, p := range known {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		case typed && name == "throughput-autoscale":
			return nil, fmt.Errorf("sim: --autoscale: throughput-autoscale is blind to GPU types: not with --cluster of several types")
		case slices.Contains(cloudPolicies, name):
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		default:
			return nil, fmt.Errorf("sim: --autoscale: unknown policy %q (want %s or all)", name, strings.Join(cloudPolicies, ", "))
		}
	}
	return out, nil
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
func cloudInputs(f simFlags, cluster []clusterspec.Group) (testbed.TypedCatalog, []workload.Workload, error) {
	var types []string
	for _, g := range cluster {
		types = append(types, g.Type)
	}
	var cat testbed.Catalog
	var check func(app string) error
	switch {
	case len(types) > 0 && f.traces == "":
		return nil, nil, fmt.Errorf("sim: --cluster needs --traces with per-type traces (placements-TYPE.csv), e.g. ../shared/sia-artifact/traces")
	case len(types) > 0:
		if err := checkTraceTypes(f.traces, types); err != nil {
			return nil, nil, err
		}
		check = typedAppCheck(f.traces, types)
	case f.traces == "":
		c, err := builtin.Catalog()
		if err != nil {
			return nil, nil, err
		}
		cat = c
	default:
		if _, err := os.Stat(f.traces); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
		}
		c, err := trace.Load(f.traces)
		if err != nil {
			return nil, nil, err
		}
		cat = c
	}
	if check == nil {
		check = func(app string) error {
			if _, ok := cat[app]; !ok {
				where := "the built-in profiles"
				if f.traces != "" {
					where = f.traces
				}
				return fmt.Errorf("%w %q: not in %s", workload.ErrUnknownApp, app, where)
			}
			return nil
		}
	}
	var wls []workload.Workload
	if f.workload != "" {
		var err error
		if wls, err = workload.LoadChecked(f.workload, check); err != nil {
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
	cats, err := trace.LoadTyped(f.traces, types, apps)
	return cats, wls, err
}

// cloudPolicy builds one policy of the comparison, adding nodes like
// tmpl; typed: on a cluster of several GPU types (pollux-het, deciding
// the size or not; --p applies to the Pollux search on one type).
func cloudPolicy(name string, f simFlags, workers int, tmpl optimizer.Node, typed bool) (optimizer.Policy, error) {
	as := optimizer.Autoscale{
		Template: tmpl,
		MinNodes: f.cloud.minNodes, MaxNodes: f.cloud.maxNodes,
		LowUtil: f.cloud.lowUtil, HighUtil: f.cloud.highUtil,
	}
	o := optimizer.Options{Workers: workers, ScalingThreshold: f.cloud.threshold}
	base := "pollux"
	if typed {
		base = "pollux-het"
	} else {
		o.PowerMean = &f.p
	}
	switch name {
	case "pollux-autoscale":
		o.Autoscale = &as
	case "throughput-autoscale":
		base, o.Autoscale = name, &as
	}
	return optimizer.Lookup(base, o)
}

// runSimAutoscale is `pollux sim --autoscale`: every workload on an
// elastic cluster under Pollux deciding the size, the throughput-based
// autoscaler and a fixed cluster of the maximum size.
func runSimAutoscale(ctx context.Context, f simFlags, policyGiven bool, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	base := sim.DefaultConfig()
	tmpl := optimizer.Node{GPUs: f.gpusPerNode}
	fixed := 0
	if f.cluster != "" {
		spec, err := clusterspec.Resolve(f.cluster)
		if err != nil {
			return badInput(fmt.Errorf("sim: %w", err))
		}
		base.Cluster, base.Semantics = spec.Groups, sim.SiaSemantics
		if tmpl, fixed, err = cloudTemplate(spec.Groups, f.cloud.gpuType); err != nil {
			return badInput(err)
		}
		if fixed > f.cloud.maxNodes {
			return badInput(fmt.Errorf("sim: --cluster has %d nodes of GPU types other than %s, always there: more than --max-nodes %d", fixed, tmpl.Type, f.cloud.maxNodes))
		}
	}
	typed := len(base.Cluster) > 1
	policies, err := cloudPolicyList(f.policy, policyGiven, typed)
	if err != nil {
		return badInput(err)
	}
	if math.IsNaN(f.p) || math.IsInf(f.p, 0) {
		return badInput(fmt.Errorf("sim: --p %v: want a finite exponent (0 is the geometric mean)", f.p))
	}
	if f.parallel < 1 {
		return badInput(fmt.Errorf("sim: --parallel %d: want at least 1", f.parallel))
	}
	base.GPUsPerNode = f.gpusPerNode
	base.Interval = f.interval.Seconds()
	base.Seed = f.seed
	base.Cloud = &sim.Cloud{
		MinNodes: f.cloud.minNodes, MaxNodes: f.cloud.maxNodes,
		InitialNodes: max(f.cloud.minNodes, fixed, 1),
		BootDelay:    f.cloud.bootDelay.Seconds(), NodeCost: f.cloud.nodeCost, GPUType: tmpl.Type,
	}
	if err := base.Validate(); err != nil {
		return badInput(fmt.Errorf("sim: %w", err))
	}
	cats, wls, err := cloudInputs(f, base.Cluster)
	if err != nil {
		return badInput(err)
	}
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return badInput(fmt.Errorf("sim: --out: %w", err))
		}
	}
	var runs []simRun
	for _, p := range policies {
		for _, wl := range wls {
			runs = append(runs, simRun{policy: p, wl: wl})
		}
	}
	workers := min(f.parallel, len(runs))
	perRun := max(1, min(2, f.parallel/workers))
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
			pol, err := cloudPolicy(r.policy, f, perRun, tmpl, typed)
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
		return err
	}
	summary := summarizeCloud(results)
	if f.out != "" {
		if err := writeCloudOut(f.out, summary, results); err != nil {
			return err
		}
	}
	if f.asJSON {
		return writeJSON(stdout, summary)
	}
	return printCloudTable(stdout, policies, summary)
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
