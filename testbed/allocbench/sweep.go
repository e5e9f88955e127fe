package allocbench

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/testbed/report"
)

// SiaSweepOptions are the settings of the scale sweep (`pollux bench
// allocator --sia-scale 1,2,4,8,16,32 --out DIR`): the Sia-scale mode's
// settings (each point sets Scale) for every N of Scales.
type SiaSweepOptions struct {
	SiaScaleOptions
	Scales []int
	// Out is the directory for scale-round-time.png, .json and .csv
	// ("": print only).
	Out string
}

// SiaSweepPoint is one N of the scale sweep: a report per policy.
type SiaSweepPoint struct {
	Scale    int              `json:"scale"`
	GPUs     int              `json:"gpus"`
	Policies []SiaScaleReport `json:"policies"`
}

// The files a scale sweep writes into its --out directory.
const (
	sweepPNG  = "scale-round-time.png" // report.WriteScalePlot's
	sweepJSON = "scale-round-time.json"
	sweepCSV  = "scale-round-time.csv"
)

// ParseScales reads --sia-scale's list of sizes ("1,2,4"): each a power
// of two in 1..32 (a scale_Nx workload of Sia's artifact, or saturn for
// 1), none twice. It returns them in ascending order.
func ParseScales(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 32 || n&(n-1) != 0 {
			return nil, usage.Errorf("--sia-scale %q: %q is not a power of two in 1..32", s, f)
		}
		if slices.Contains(out, n) {
			return nil, usage.Errorf("--sia-scale %q: %d given twice", s, n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// RunSiaScale runs the Sia-scale mode for the --sia-scale argument arg:
// a single N without an output directory as SiaScale does (its output
// unchanged), otherwise the sweep over ParseScales(arg) (SiaSweep).
func RunSiaScale(ctx context.Context, arg string, o SiaSweepOptions, stdout, stderr io.Writer) error {
	if !strings.Contains(arg, ",") && o.Out == "" {
		n, err := strconv.Atoi(strings.TrimSpace(arg))
		if err != nil {
			return usage.Errorf("--sia-scale %q: want N in 1..64 or a list of powers of two in 1..32", arg)
		}
		o.Scale = n
		return SiaScale(ctx, o.SiaScaleOptions, stdout, stderr)
	}
	scales, err := ParseScales(arg)
	if err != nil {
		return err
	}
	o.Scales = scales
	return SiaSweep(ctx, o, stdout, stderr)
}

// SiaSweep replays Sia's scale workload for every N of o.Scales (as
// SiaScale does) and prints one JSON object (sia_scale_sweep: a point per
// N) or a table. With o.Out it also writes there scale-round-time.png
// (report.WriteScalePlot, beside the runtimes of the artifact's
// published.json), scale-round-time.json (what it prints with --json)
// and scale-round-time.csv (a row per N and policy), rewritten after
// every N. Every input is checked before the first replay.
func SiaSweep(ctx context.Context, o SiaSweepOptions, stdout, stderr io.Writer) error {
	if len(o.Scales) == 0 {
		return usage.Errorf("--sia-scale: no sizes")
	}
	if o.MaxRounds < 0 {
		return usage.Errorf("--max-rounds %d: want 0 or more", o.MaxRounds)
	}
	for _, n := range o.Scales {
		if n < 1 || n > 32 || n&(n-1) != 0 {
			return usage.Errorf("--sia-scale %d: want a power of two in 1..32", n)
		}
		if _, err := os.Stat(scaleWorkload(o.Dir, o.Workload, n)); err != nil {
			return usage.Errorf("--sia-scale %d: %w", n, err)
		}
	}
	var refs []report.RuntimeRef
	if o.Out != "" {
		var err error
		if refs, err = readPublished(o.Dir); err != nil {
			return err
		}
		if err := checkWritable(o.Out); err != nil {
			return err
		}
	}
	var (
		points []SiaSweepPoint
		all    []SiaScaleReport
		doc    map[string]any
		files  = []string{filepath.Join(o.Out, sweepPNG), filepath.Join(o.Out, sweepCSV), filepath.Join(o.Out, sweepJSON)}
	)
	start := time.Now()
	for i, n := range o.Scales {
		fmt.Fprintf(stderr, "scale %d/%d: %dx (%.0f s so far)\n", i+1, len(o.Scales), n, time.Since(start).Seconds())
		po := o.SiaScaleOptions
		po.Scale = n
		reports, err := replayScale(ctx, po, stderr)
		if err != nil {
			return err
		}
		pt := SiaSweepPoint{Scale: n, Policies: reports}
		if len(reports) > 0 {
			pt.GPUs = reports[0].GPUs
		}
		points = append(points, pt)
		all = append(all, reports...)
		doc = map[string]any{"sia_scale_sweep": points}
		if o.Out != "" {
			// Written after every N, so a sweep cut short leaves the
			// sizes it finished.
			doc["published"], doc["files"] = refs, files
			if err := writeSweep(o.Out, points, refs, doc); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "  wrote %s (%d of %d sizes)\n", strings.Join(files, ", "), len(points), len(o.Scales))
		}
	}
	if o.JSON {
		return jsonout.Write(stdout, doc)
	}
	return writeScaleTable(stdout, all)
}

// readPublished reads the policy runtimes of published.json under Sia's
// artifact directory dir.
func readPublished(dir string) ([]report.RuntimeRef, error) {
	path := filepath.Join(dir, "published.json")
	f, err := os.Open(path)
	if err != nil {
		return nil, usage.Errorf("--sia-artifact: %w", err)
	}
	defer f.Close()
	refs, err := report.ReadPublishedRuntimes(f)
	if err != nil {
		return nil, usage.Errorf("--sia-artifact: %s: %w", path, err)
	}
	return refs, nil
}

// checkWritable makes dir and checks a file can be created in it.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usage.Errorf("--out: %w", err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return usage.Errorf("--out %s: not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// writeSweep writes the plot, the CSV of points and the JSON document doc
// into dir.
func writeSweep(dir string, points []SiaSweepPoint, refs []report.RuntimeRef, doc map[string]any) error {
	var series []report.ScalePoint
	for _, pt := range points {
		for _, r := range pt.Policies {
			series = append(series, report.ScalePoint{Policy: r.Policy, GPUs: r.GPUs, MedianS: r.MedianS, P95S: r.P95S})
		}
	}
	if _, err := report.WriteScalePlot(dir, series, refs); err != nil {
		return fmt.Errorf("allocbench: %w", err)
	}
	if err := writeSweepCSV(filepath.Join(dir, sweepCSV), points); err != nil {
		return err
	}
	path := filepath.Join(dir, sweepJSON)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("allocbench: %w", err)
	}
	if err := jsonout.Write(f, doc); err != nil {
		f.Close()
		return fmt.Errorf("allocbench: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("allocbench: %w", err)
	}
	return nil
}

// writeSweepCSV writes a row per N and policy of points to path.
func writeSweepCSV(path string, points []SiaSweepPoint) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("allocbench: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"scale", "gpus", "nodes", "jobs", "policy", "rounds", "max_active_jobs", "median_round_s", "p95_round_s", "max_round_s", "replay_complete", "inexact_rounds", "worst_gap"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, pt := range points {
		for _, r := range pt.Policies {
			_ = w.Write([]string{
				strconv.Itoa(r.Scale), strconv.Itoa(r.GPUs), strconv.Itoa(r.Nodes), strconv.Itoa(r.Jobs), r.Policy,
				strconv.Itoa(r.Rounds), strconv.Itoa(r.MaxJobs), g(r.MedianS), g(r.P95S), g(r.MaxS),
				strconv.FormatBool(r.Complete), strconv.Itoa(r.InexactRounds), g(r.WorstGap),
			})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("allocbench: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("allocbench: %w", err)
	}
	return nil
}
