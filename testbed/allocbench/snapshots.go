package allocbench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"gonum.org/v1/gonum/stat"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/optimizer"
	"pollux/optimizer/refsnap"
)

// Snapshots runs, on every snap-*.json of dir (the Python artifact's
// recorded rounds), our objective on the current allocation and our
// search from a cold start with seeds seeds, and prints the figures next
// to the artifact's own (a table, or one JSON object).
func Snapshots(w io.Writer, dir string, seeds int, asJSON bool) error {
	if seeds < 1 {
		return usage.Errorf("--seeds %d: need at least 1", seeds)
	}
	entries, err := refsnap.LoadDir(dir)
	if err != nil {
		return usage.Wrap(err)
	}
	out := map[string]SnapshotResult{}
	for _, e := range entries {
		obj, err := optimizer.NewObjective(e.Snapshot, optimizer.DefaultPowerMean)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
		cur := make([]optimizer.Placement, len(e.Snapshot.Jobs))
		for j := range cur {
			cur[j] = e.Snapshot.Jobs[j].Current
		}
		fits := make([]float64, 0, seeds)
		times := make([]float64, 0, seeds)
		for s := range seeds {
			snap := *e.Snapshot
			snap.Seed = uint64(s)
			start := time.Now()
			res, err := optimizer.NewPollux().Allocate(&snap, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", e.Name, err)
			}
			times = append(times, time.Since(start).Seconds())
			fits = append(fits, res.Diagnostics.Fitness)
		}
		slices.Sort(fits)
		slices.Sort(times)
		out[e.Name] = SnapshotResult{
			Jobs:             len(e.Snapshot.Jobs),
			CurrentFitness:   obj.Fitness(cur),
			Fitness:          stat.Quantile(0.5, stat.Empirical, fits, nil),
			RoundS:           stat.Quantile(0.5, stat.Empirical, times, nil),
			ReferenceCurrent: e.Reference.CurrentFitness,
			ReferenceFitness: e.Reference.GAFitnessMed,
		}
	}
	if asJSON {
		return jsonout.Write(w, map[string]any{"snapshots": out})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "snapshot\tjobs\tcurrent\treference current\treference GA\tours\tour round s\n")
	for _, e := range entries {
		r := out[e.Name]
		fmt.Fprintf(tw, "%s\t%d\t%.9f\t%.9f\t%.6f\t%.6f\t%.4f\n", e.Name, r.Jobs, r.CurrentFitness, r.ReferenceCurrent, r.ReferenceFitness, r.Fitness, r.RoundS)
	}
	return tw.Flush()
}
