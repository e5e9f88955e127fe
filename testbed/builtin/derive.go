package builtin

import (
	"fmt"
	"math"
	"path/filepath"

	"pollux/optimizer/goodput"
	"pollux/testbed/trace"
)

// Derive fits one profile per application of an artifact trace directory:
// the throughput model on every measured step time, a least-squares line
// through log(phi) over the training fraction, with phi the noise scale
// M0*grad_var/grad_sqr measured at the initial batch, and the mean progress
// of one epoch. It is what profiles.json was made with (see cmd gen).
func Derive(dir string) ([]*Profile, error) {
	cat, err := trace.Load(dir)
	if err != nil {
		return nil, err
	}
	var ps []*Profile
	for _, name := range cat.Names() {
		app := cat[name]
		rows, err := trace.LoadMeasured(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		points := make([]goodput.ProfilePoint, len(rows))
		for i, r := range rows {
			points[i] = r.ProfilePoint
		}
		params, err := goodput.Fit(points)
		if err != nil {
			return nil, fmt.Errorf("builtin: %s: %w", name, err)
		}
		l := app.Limits()
		epochs := app.MaxEpochs()
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
		p := &Profile{
			App: name, Batch: l, Epochs: epochs, Params: params,
			StepsPerEpoch: app.EpochEnd(epochs) / float64(epochs),
			NoiseA:        a, NoiseB: b,
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}
