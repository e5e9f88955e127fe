package sim

import (
	"fmt"
	"math"
	"strings"

	"pollux/optimizer/goodput"
	"pollux/testbed"
)

// CrossRackModel is how the simulator slows a placement across racks,
// which no trace measured, given the ratio X of in-rack to cross-rack
// bandwidth.
type CrossRackModel int

const (
	// OverlapModel (the default): data-parallel training overlaps the
	// gradient all-reduce with the backward pass, and the traces record
	// only the part of the synchronisation left exposed; a link X times
	// slower makes the whole all-reduce X times longer, exposing more of
	// it. The throughput model describes this overlap (the gamma-norm of
	// compute and network time), so a placement's step time across racks
	// is its measured step time scaled by what the application's model,
	// fitted once on its own in-rack step times, predicts for the same
	// placement with its network terms X times larger. The accumulation
	// time (no synchronisation) is unchanged: the extra time is sync.
	// Its limit: the fitted network terms also absorb whatever else slows
	// distributed steps down, which is then scaled too.
	OverlapModel CrossRackModel = iota
	// ExposedModel scales only the exposed synchronisation the traces
	// measured: step time + (X - 1) x sync time. It assumes that what the
	// backward pass hid stays hidden when X times longer: a lower bound.
	ExposedModel
)

// String names the model as the --cross-rack-model flag does.
func (m CrossRackModel) String() string {
	if m == ExposedModel {
		return "exposed"
	}
	return "overlap"
}

// MarshalText implements encoding.TextMarshaler.
func (m CrossRackModel) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// ParseCrossRackModel reads "overlap" or "exposed".
func ParseCrossRackModel(s string) (CrossRackModel, error) {
	switch strings.ToLower(s) {
	case "overlap":
		return OverlapModel, nil
	case "exposed":
		return ExposedModel, nil
	}
	return 0, fmt.Errorf("%w: cross-rack model %q, want overlap or exposed", ErrBadConfig, s)
}

// crossRack applies a CrossRackModel.
type crossRack struct {
	ratio   float64
	kind    CrossRackModel
	perNode int
	models  map[testbed.Application]*goodput.Params
}

func newCrossRack(ratio float64, kind CrossRackModel, perNode int) *crossRack {
	return &crossRack{ratio: ratio, kind: kind, perNode: max(perNode, 1), models: map[testbed.Application]*goodput.Params{}}
}

// apply turns the in-rack step and sync times of app on placement (n
// nodes, k replicas, atomic batch m) into the cross-rack ones.
func (c *crossRack) apply(app testbed.Application, n, k int, m, step, sync float64) (float64, float64) {
	if c.kind == ExposedModel {
		return step + (c.ratio-1)*sync, c.ratio * sync
	}
	p := c.model(app)
	if p == nil || n < 2 {
		return step, sync
	}
	in := p.SyncTime(n, k, m)
	x := p.WithCrossRack(c.ratio).SyncTimeRacks(2, n, k, m)
	f := x / in
	if !(f >= 1) || math.IsInf(f, 0) {
		return step, sync
	}
	extra := step * (f - 1)
	return step + extra, sync + extra
}

// model is app's throughput model fitted on its in-rack step times over
// a grid of placements (one GPU, one node, 2 to 16 full nodes) and atomic
// batches; nil if the fit fails (the placement then costs nothing more).
func (c *crossRack) model(app testbed.Application) *goodput.Params {
	if p, ok := c.models[app]; ok {
		return p
	}
	l := app.Limits()
	var layouts [][]int
	for _, k := range []int{1, 2, c.perNode} {
		layouts = append(layouts, []int{k})
	}
	layouts = append(layouts, []int{1, 1})
	for _, n := range []int{2, 4, 8, 16} {
		pl := make([]int, n)
		for i := range pl {
			pl[i] = c.perNode
		}
		layouts = append(layouts, pl)
	}
	var pts []goodput.ProfilePoint
	for _, pl := range layouts {
		k := testbed.Replicas(pl)
		for i := 0; i < 6; i++ {
			m := math.Round(float64(l.MinLocal) * math.Pow(float64(l.MaxLocal)/float64(l.MinLocal), float64(i)/5))
			step, sync := app.StepTimes(testbed.NormalizePlacement(pl), m)
			if !(step > sync) || !(sync >= 0) {
				continue
			}
			pts = append(pts, goodput.ProfilePoint{Nodes: len(pl), Replicas: k, LocalBatch: int(m), AccumTime: step - sync, StepTime: step})
		}
	}
	var out *goodput.Params
	if p, err := goodput.Fit(pts); err == nil {
		out = &p
	}
	c.models[app] = out
	return out
}
