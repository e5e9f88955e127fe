package allocbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/gonum/stat"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/testbed/clusterspec"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

// SiaScaleOptions are the Sia-scale mode's settings (`pollux bench
// allocator --sia-scale N`).
type SiaScaleOptions struct {
	Scale int // N, 1..64
	// Dir is Sia's artifact directory, Workload the workload of its scale
	// directory, Policies the comma-separated policies to time.
	Dir, Workload, Policies string
	MaxRounds               int // stop each replay after this many rounds (0: run to completion)
	JSON                    bool
}

// SiaScaleReport is one policy's line of `pollux bench allocator
// --sia-scale N`.
type SiaScaleReport struct {
	Policy   string  `json:"policy"`
	Scale    int     `json:"scale"`
	GPUs     int     `json:"gpus"`
	Nodes    int     `json:"nodes"`
	Jobs     int     `json:"jobs"`
	Rounds   int     `json:"rounds"`
	MaxJobs  int     `json:"max_active_jobs"`
	MedianS  float64 `json:"median_round_s"`
	P95S     float64 `json:"p95_round_s"`
	MaxS     float64 `json:"max_round_s"`
	Complete bool    `json:"replay_complete"`
	// InexactRounds counts rounds a policy solving an integer program
	// did not prove optimal; WorstGap is the largest relative gap to the
	// bound among them.
	InexactRounds int     `json:"inexact_rounds"`
	WorstGap      float64 `json:"worst_gap"`
}

// timedPolicy records the wall time of every round of the policy it wraps.
type timedPolicy struct {
	optimizer.Policy
	times   []float64
	maxJobs int
	inexact int
	gap     float64
	limit   int
}

// errEnough stops a replay once enough rounds are timed.
var errEnough = fmt.Errorf("enough rounds")

func (p *timedPolicy) Allocate(snap *optimizer.Snapshot, prev *optimizer.State) (optimizer.Result, error) {
	if p.limit > 0 && len(p.times) >= p.limit {
		return optimizer.Result{}, errEnough
	}
	start := time.Now()
	res, err := p.Policy.Allocate(snap, prev)
	p.times = append(p.times, time.Since(start).Seconds())
	p.maxJobs = max(p.maxJobs, len(snap.Jobs))
	if d := res.Diagnostics; err == nil && d.Objective != 0 && !d.Exact {
		p.inexact++
		if d.Objective != 0 {
			p.gap = max(p.gap, (d.Objective-d.Bound)/abs(d.Objective))
		}
	}
	return res, err
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// SiaScale replays Sia's scale workload (every Helios job issued
// o.Scale times; 1 replays the saturn workload itself) on Sia's 64-GPU
// heterogeneous cluster with o.Scale times the nodes of every GPU type,
// under each of o.Policies, with Sia's simulator semantics and no
// fairness runs, and prints the median, p95 and largest wall time of each
// policy's rounds (a table, or one JSON object).
func SiaScale(ctx context.Context, o SiaScaleOptions, stdout, stderr io.Writer) error {
	n := o.Scale
	if n < 1 || n > 64 {
		return usage.Errorf("--sia-scale %d: want 1..64", n)
	}
	if o.MaxRounds < 0 {
		return usage.Errorf("--max-rounds %d: want 0 or more", o.MaxRounds)
	}
	if _, err := os.Stat(scaleWorkload(o.Dir, o.Workload, n)); err != nil {
		return usage.Errorf("--sia-scale %d: %w", n, err)
	}
	reports, err := replayScale(ctx, o, stderr)
	if err != nil {
		return err
	}
	if o.JSON {
		return jsonout.Write(stdout, map[string]any{"sia_scale": reports})
	}
	return writeScaleTable(stdout, reports)
}

// scaleWorkload is the path of workload wl of Sia's scale_Nx directory
// under the artifact directory dir (saturn for N = 1).
func scaleWorkload(dir, wl string, n int) string {
	wlDir := filepath.Join(dir, "workloads", "scale", fmt.Sprintf("scale_%dx", n))
	if n == 1 {
		wlDir = filepath.Join(dir, "workloads", "saturn")
	}
	return filepath.Join(wlDir, wl+".csv")
}

// replayScale replays o.Scale's workload under each of o.Policies and
// returns a report per policy.
func replayScale(ctx context.Context, o SiaScaleOptions, stderr io.Writer) ([]SiaScaleReport, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	n := o.Scale
	wlPath := scaleWorkload(o.Dir, o.Workload, n)
	spec, err := clusterspec.Resolve("hetero")
	if err != nil {
		return nil, err
	}
	for i := range spec.Groups {
		spec.Groups[i].Nodes *= n
	}
	traces := filepath.Join(o.Dir, "traces")
	wls, err := workload.Load(wlPath, nil)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	var apps []string
	for _, j := range wls[0].Jobs {
		if !slices.Contains(apps, j.App) {
			apps = append(apps, j.App)
		}
	}
	cats, err := trace.LoadTyped(traces, spec.Types(), apps)
	if err != nil {
		return nil, usage.Wrap(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Cluster = spec.Groups
	cfg.Semantics = sim.SiaSemantics
	cfg.NoFairness = true
	var reports []SiaScaleReport
	for _, name := range strings.Split(o.Policies, ",") {
		name = strings.TrimSpace(name)
		inner, err := optimizer.Lookup(name, optimizer.Options{Workers: 2, ProfiledNodes: cats.ProfiledNodes()})
		if err != nil {
			return nil, usage.Errorf("--policy %q: %w", name, err)
		}
		pol := &timedPolicy{Policy: inner, limit: o.MaxRounds}
		fmt.Fprintf(stderr, "replaying %s (%d jobs) on %s under %s\n", filepath.Base(filepath.Dir(wlPath))+"/"+o.Workload, len(wls[0].Jobs), spec, name)
		start := time.Now()
		_, err = sim.RunTyped(ctx, cfg, cats, wls[0], pol, sim.ModeFor(name), nil)
		complete := err == nil
		if err != nil && !strings.Contains(err.Error(), errEnough.Error()) {
			return nil, err
		}
		fmt.Fprintf(stderr, "  %d rounds in %.1f s\n", len(pol.times), time.Since(start).Seconds())
		times := slices.Clone(pol.times)
		slices.Sort(times)
		r := SiaScaleReport{
			Policy: name, Scale: n, GPUs: spec.TotalGPUs(), Jobs: len(wls[0].Jobs), Rounds: len(times),
			MaxJobs: pol.maxJobs, Complete: complete, InexactRounds: pol.inexact, WorstGap: pol.gap,
		}
		for _, g := range spec.Groups {
			r.Nodes += g.Nodes
		}
		if len(times) > 0 {
			r.MedianS = stat.Quantile(0.5, stat.Empirical, times, nil)
			r.P95S = stat.Quantile(0.95, stat.Empirical, times, nil)
			r.MaxS = times[len(times)-1]
		}
		reports = append(reports, r)
	}
	return reports, nil
}

// writeScaleTable prints reports as a table.
func writeScaleTable(w io.Writer, reports []SiaScaleReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "policy\tscale\tGPUs\tjobs\tmax active\trounds\tmedian s\tp95 s\tmax s\tinexact rounds\tworst gap\n")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%dx\t%d\t%d\t%d\t%d\t%.4f\t%.4f\t%.4f\t%d\t%.2g\n", r.Policy, r.Scale, r.GPUs, r.Jobs, r.MaxJobs, r.Rounds, r.MedianS, r.P95S, r.MaxS, r.InexactRounds, r.WorstGap)
	}
	return tw.Flush()
}
