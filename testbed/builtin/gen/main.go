// Command gen derives the built-in parametric profiles from the artifact's
// traces and prints them as JSON: the throughput model fitted on every
// measured step time, a log-linear fit of the noise scale measured at the
// initial batch over training, and the mean progress of one epoch.
//
//	go run ./testbed/builtin/gen --traces ../shared/pollux-artifact/traces > testbed/builtin/profiles.json
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"pollux/optimizer/goodput"
	"pollux/testbed/builtin"
	"pollux/testbed/trace"
)

func main() {
	dir := flag.String("traces", "../shared/pollux-artifact/traces", "trace directory in the artifact layout")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	cat, err := trace.Load(dir)
	if err != nil {
		return err
	}
	var ps []*builtin.Profile
	for _, name := range cat.Names() {
		app := cat[name]
		rows, err := trace.LoadMeasured(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		points := make([]goodput.ProfilePoint, len(rows))
		for i, r := range rows {
			points[i] = r.ProfilePoint
		}
		params, err := goodput.Fit(points)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		l := app.Limits()
		epochs := app.MaxEpochs()
		// Least squares of log phi on x = epoch/epochs at M0.
		var sx, sy, sxx, sxy, n float64
		for e := 0; e < epochs; e++ {
			g := app.GradStats(float64(l.InitBatch), e)
			if !(g.GradSqr > 0) || !(g.GradVar > 0) {
				continue
			}
			x := float64(e) / float64(epochs)
			y := math.Log(float64(l.InitBatch) * g.GradVar / g.GradSqr)
			sx, sy, sxx, sxy, n = sx+x, sy+y, sxx+x*x, sxy+x*y, n+1
		}
		a, b := 0.0, 0.0
		if n > 0 {
			a = sy / n
		}
		if d := n*sxx - sx*sx; n > 1 && d > 0 {
			b = (n*sxy - sx*sy) / d
			a = (sy - b*sx) / n
		}
		ps = append(ps, &builtin.Profile{
			App: name, Batch: l, Epochs: epochs, Params: params,
			StepsPerEpoch: app.EpochEnd(epochs) / float64(epochs),
			NoiseA:        a, NoiseB: b,
		})
	}
	out, err := builtin.Encode(ps)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", out)
	return err
}
