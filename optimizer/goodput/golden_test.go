package goodput

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of testdata/")

// fitGolden records the fits of the seven-parameter model (go test -run
// FitGolden -update ./optimizer/goodput wrote it at the commit before the
// cross-rack term existed, and again when the RMSE terms were smoothed at
// an exact fit, which moved the fits of these cases by less than 1e-6
// relative, one-batch/0's network terms by a few percent along a flat
// direction of the loss).
const fitGolden = "testdata/fit-golden.json"

// goldenFitCases are point sets that exercise every pinning rule of Fit:
// all placements, one node only, one local batch, K <= 2 only, one GPU.
func goldenFitCases() map[string][]ProfilePoint {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	out := map[string][]ProfilePoint{}
	for seed := range uint64(6) {
		r := rand.New(rand.NewPCG(seed, 11))
		all := synthetic(truth, 0.05*float64(seed), r)
		out[fmt.Sprintf("all/%d", seed)] = all
		var oneNode, oneBatch, small, single []ProfilePoint
		for _, p := range all {
			if p.Nodes == 1 {
				oneNode = append(oneNode, p)
			}
			if p.LocalBatch == 16 {
				oneBatch = append(oneBatch, p)
			}
			if p.Replicas <= 2 {
				small = append(small, p)
			}
			if p.Replicas == 1 {
				single = append(single, p)
			}
		}
		out[fmt.Sprintf("one-node/%d", seed)] = oneNode
		out[fmt.Sprintf("one-batch/%d", seed)] = oneBatch
		out[fmt.Sprintf("small-k/%d", seed)] = small
		out[fmt.Sprintf("one-gpu/%d", seed)] = single
	}
	return out
}

// TestFitGolden: without cross-rack points, Fit gives exactly the
// recorded parameters.
func TestFitGolden(t *testing.T) {
	got := map[string]Params{}
	for name, pts := range goldenFitCases() {
		p, err := Fit(pts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = p
	}
	path := filepath.FromSlash(fitGolden)
	if *updateGolden {
		data, err := json.MarshalIndent(got, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]Params
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d cases, golden has %d", len(got), len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: fitted %+v, golden %+v", name, got[name], w)
		}
	}
}
