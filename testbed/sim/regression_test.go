package sim

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

const artifact = "../../../shared/pollux-artifact"

// idealTime is a lower bound on how long a job of app trains: every epoch
// at the best true goodput over every GPU count up to the application's
// cap (packed onto full nodes) and every candidate batch of the per-job
// search.
func idealTime(app testbed.Application, perNode int) float64 {
	l := app.Limits()
	type cand struct{ batch, iter float64 }
	var cands []cand
	for k := 1; k <= min(64, l.MaxBatch/l.MinLocal); k++ {
		var placement []int
		for left := k; left > 0; left -= perNode {
			placement = append(placement, min(left, perNode))
		}
		lo := math.Max(float64(l.InitBatch), float64(l.MinLocal*k))
		hi := math.Max(float64(l.MaxBatch), lo)
		for i := 0; i < 50; i++ {
			m, s := fixedSplit(l, k, lo*math.Pow(hi/lo, float64(i)/49))
			step, sync := app.StepTimes(placement, float64(m))
			cands = append(cands, cand{float64(k * m * (s + 1)), step + float64(s)*(step-sync)})
		}
	}
	total := 0.0
	for e := 0; e < app.MaxEpochs(); e++ {
		best := 0.0
		for _, c := range cands {
			best = math.Max(best, app.GradStats(c.batch, e).Gain(c.batch, float64(l.InitBatch))/c.iter)
		}
		total += (app.EpochEnd(e+1) - app.EpochEnd(e)) / best
	}
	return total
}

// TestRegressionReducedWorkload replays the first 40 jobs of the
// artifact's workload-6 under all three policies and checks each average
// JCT against a band derived, not copied:
//
//   - upper bound: 1.10 x the mean JCT the artifact published for the same
//     40 jobs in the full 160-job run. Dropping the 120 later arrivals can
//     only give the first 40 more GPUs (Tiresias admits in arrival order
//     within a queue; Optimus and Pollux share among fewer jobs), and 10 %
//     is the fidelity band of the full comparison (docs/fidelity.md).
//   - lower bound: 0.9 x the mean of each job's wait for the first round
//     after its submission plus the 30 s start plus its ideal training
//     time (idealTime: best true goodput at any size, every epoch). No
//     schedule beats that; 0.9 covers the batch grid and placements other
//     than packed ones.
//   - Pollux below both baselines, the paper's claim (it is 32 % and 52 %
//     below on the full workloads).
func TestRegressionReducedWorkload(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	traces := filepath.Join(artifact, "traces")
	if _, err := os.Stat(traces); err != nil {
		t.Skipf("artifact traces not present at %s: %v", traces, err)
	}
	cat, err := trace.Load(traces)
	if err != nil {
		t.Fatal(err)
	}
	wls, err := workload.Load(filepath.Join(artifact, "workloads", "workload-6.csv"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wl := wls[0]
	wl.Jobs = wl.Jobs[:40]
	cfg := DefaultConfig()
	lower := 0.0
	for _, j := range wl.Jobs {
		wait := math.Ceil(j.Time/cfg.Interval)*cfg.Interval - j.Time
		lower += wait + cfg.Restart + idealTime(cat[j.App], cfg.GPUsPerNode)
	}
	lower = 0.9 * lower / float64(len(wl.Jobs))
	policies := []optimizer.Policy{optimizer.NewPollux(), optimizer.Tiresias{}, optimizer.Optimus{}}
	avg := map[string]float64{}
	for _, pol := range policies {
		res, err := Run(context.Background(), cfg, cat, wl, pol, ModeFor(pol.Name()), nil)
		if err != nil {
			t.Fatal(err)
		}
		published := publishedMean(t, pol.Name(), wl)
		upper := 1.10 * published
		got := res.Metrics.AvgJCT
		avg[pol.Name()] = got
		t.Logf("%s: avg JCT %.0f s, band [%.0f, %.0f] (published for these jobs in the full run: %.0f)", pol.Name(), got, lower, upper, published)
		if got < lower || got > upper {
			t.Errorf("%s: avg JCT %.0f s outside [%.0f, %.0f]", pol.Name(), got, lower, upper)
		}
	}
	if avg["pollux"] >= avg["tiresias"] || avg["pollux"] >= avg["optimus"] {
		t.Errorf("Pollux %.0f s not below Tiresias %.0f s and Optimus %.0f s", avg["pollux"], avg["tiresias"], avg["optimus"])
	}
}

// publishedMean is the mean JCT the artifact published for wl's jobs in
// its full workload-6 run.
func publishedMean(t *testing.T, policy string, wl workload.Workload) float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(artifact, "published", policy+"-1.0.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pub struct {
		JCTs map[string]map[string]float64 `json:"jcts"`
	}
	if err := json.Unmarshal(data, &pub); err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, j := range wl.Jobs {
		v, ok := pub.JCTs["workload-6"][j.Name]
		if !ok {
			t.Fatalf("%s: no published JCT for %s", policy, j.Name)
		}
		sum += v
	}
	return sum / float64(len(wl.Jobs))
}
