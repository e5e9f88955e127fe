package job

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// A job's measurements are kept per GPU type (the type of the nodes its
// incarnation ran on; "" for untyped nodes) and it fits one throughput
// model per type, from that type's measurements alone, as soon as the
// type has one profiled configuration (as the simulator's jobs do): a
// job that ran on T4s never bids its T4 throughput for A100s. A type the
// job has not run on gets no model from the actor: the allocator
// bootstraps it from the job's best-known model (docs/control-plane.md).

// typeProfile is what a job measured on one GPU type and the model it
// fitted there.
type typeProfile struct {
	entries   map[profileKey]state.ProfileEntry
	params    goodput.Params
	hasModel  bool
	fitted    time.Time
	newConfig bool // a configuration was profiled for the first time since the last fit
	newCounts bool // measurements were added since the last fit
}

func newTypeProfile() *typeProfile {
	return &typeProfile{entries: map[profileKey]state.ProfileEntry{}}
}

// points are the profile's entries in configuration order.
func (p *typeProfile) points() []goodput.ProfilePoint {
	pts := make([]goodput.ProfilePoint, 0, len(p.entries))
	for _, key := range slices.SortedFunc(maps.Keys(p.entries), compareKeys) {
		pts = append(pts, p.entries[key].ProfilePoint)
	}
	return pts
}

// count is how many reports the profile's entries cover.
func (p *typeProfile) count() uint64 {
	var n uint64
	for _, e := range p.entries {
		n += e.Count
	}
	return n
}

// mostReplicas is the most replicas the profile covers.
func (p *typeProfile) mostReplicas() int {
	most := 0
	for key := range p.entries {
		most = max(most, key[1])
	}
	return most
}

// fit fits the profile's model, warm-started from its previous one.
func (p *typeProfile) fit() (goodput.Params, error) {
	if p.hasModel {
		return goodput.Refit(p.points(), p.params)
	}
	return goodput.Fit(p.points())
}

// bestType is the type of the job's best-known model: of the types with a
// model, the one measured most (then the first by name); ok is false
// when no type has a model.
func bestType(profiles map[string]*typeProfile) (best string, ok bool) {
	var bestN uint64
	for _, t := range slices.Sorted(maps.Keys(profiles)) {
		p := profiles[t]
		if !p.hasModel {
			continue
		}
		if n := p.count(); !ok || n > bestN {
			best, bestN, ok = t, n, true
		}
	}
	return best, ok
}

// bidOn builds a job's bid (without its session and version) from its
// per-type profiles and gradient statistics: the top-level model and
// tables are the best-known type's, and every named type with a model
// has its part. Every table covers 1..the replica bound of the most
// replicas profiled on any type.
func bidOn(spec state.JobSpec, profiles map[string]*typeProfile, grad goodput.GradStats, hasGrad bool) state.Bid {
	most := 0
	for _, p := range profiles {
		most = max(most, p.mostReplicas())
	}
	bound := replicaBound(spec, most)
	model := func(p goodput.Params) *goodput.Model {
		md := &goodput.Model{Params: p, Limits: spec.Limits, Grad: grad}
		if md.Validate() != nil {
			return nil
		}
		return md
	}
	b := state.Bid{HasGrad: hasGrad, MostProfiled: most}
	if hasGrad {
		b.Grad = grad
	}
	var top *goodput.Model
	best, ok := bestType(profiles)
	if ok {
		if top = model(profiles[best].params); top != nil {
			b.HasModel, b.Params = true, profiles[best].params
		}
	}
	if !b.HasModel {
		b.Single, b.Multi = tables(nil, spec.Limits, grad, bound)
		return b
	}
	for _, t := range slices.Sorted(maps.Keys(profiles)) {
		p := profiles[t]
		md := model(p.params)
		if t == "" || !p.hasModel || md == nil {
			continue
		}
		tb := state.TypeBid{GPUType: t, Params: p.params, MostProfiled: p.mostReplicas()}
		tb.Single, tb.Multi = tables(md, spec.Limits, grad, bound)
		if t == best {
			// The top-level tables are the best-known type's: the same
			// choices, not computed twice.
			b.Single, b.Multi = tb.Single, tb.Multi
		}
		b.Types = append(b.Types, tb)
	}
	if b.Single == nil {
		b.Single, b.Multi = tables(top, spec.Limits, grad, bound)
	}
	return b
}

func compareKeys(a, b profileKey) int {
	for i := range a {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}
