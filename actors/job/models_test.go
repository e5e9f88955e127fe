package job

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"pollux/consensus/state"
	"pollux/optimizer/goodput"
	"pollux/testbed/builtin"
)

// profileFrom measures configurations of a job whose true throughput
// parameters are p: one entry per configuration, count reports each.
func profileFrom(typ string, p goodput.Params, count uint64, cfgs ...profileKey) *typeProfile {
	tp := newTypeProfile()
	for _, c := range cfgs {
		m := float64(c[2])
		tp.entries[c] = state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: c[0], Replicas: c[1], LocalBatch: c[2],
			AccumTime: p.AccumTime(m), StepTime: p.IterTime(c[0], c[1], m, 0)}, Count: count, GPUType: typ}
	}
	return tp
}

// fitted fits every profile as the actor's refit does.
func fitted(t *testing.T, ps map[string]*typeProfile) map[string]*typeProfile {
	t.Helper()
	for typ, p := range ps {
		params, err := p.fit()
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		p.params, p.hasModel = params, true
	}
	return ps
}

func TestBidPerGPUType(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 16, Limits: cat["cifar10"].Limits()}
	grad := cat["cifar10"].GradStats(float64(spec.Limits.InitBatch), 0)
	truth := goodput.Params{AlphaC: 0.02, BetaC: 0.0004, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.05, BetaR: 0.004, Gamma: 1.3}
	slow := truth
	for _, v := range []*float64{&slow.AlphaC, &slow.BetaC, &slow.AlphaN, &slow.BetaN, &slow.AlphaR, &slow.BetaR} {
		*v *= 3
	}
	many := []profileKey{{1, 1, 128}, {1, 2, 256}, {1, 4, 256}, {2, 8, 512}}
	few := []profileKey{{1, 1, 128}, {1, 2, 256}}
	tests := []struct {
		name     string
		profiles map[string]*typeProfile
		// want: the top-level model's type, the per-type parts' types,
		// and the most replicas profiled
		top   string
		parts []string
		most  int
	}{
		{name: "untyped only: no parts, as before types", top: "",
			profiles: map[string]*typeProfile{"": profileFrom("", truth, 5, many...)}, most: 8},
		{name: "one type", top: "a100", parts: []string{"a100"},
			profiles: map[string]*typeProfile{"a100": profileFrom("a100", truth, 5, many...)}, most: 8},
		{name: "two types, the one measured most on top", top: "t4", parts: []string{"a100", "t4"},
			profiles: map[string]*typeProfile{"a100": profileFrom("a100", truth, 1, many...), "t4": profileFrom("t4", slow, 10, few...)}, most: 8},
		{name: "a tie goes to the first by name", top: "a100", parts: []string{"a100", "t4"},
			profiles: map[string]*typeProfile{"a100": profileFrom("a100", truth, 2, few...), "t4": profileFrom("t4", slow, 2, few...)}, most: 2},
		{name: "untyped beside a type", top: "", parts: []string{"t4"},
			profiles: map[string]*typeProfile{"": profileFrom("", truth, 9, many...), "t4": profileFrom("t4", slow, 1, few...)}, most: 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := fitted(t, tc.profiles)
			b := bidOn(spec, ps, grad, true)
			b.Session, b.Version = 1, 1
			if err := state.CheckBid(&state.Job{ID: "j", Spec: spec}, &b); err != nil {
				t.Fatalf("the bid is refused: %v", err)
			}
			if !b.HasModel || b.Params != ps[tc.top].params || b.MostProfiled != tc.most {
				t.Errorf("top-level model %+v (most %d), want %s's (most %d)", b.Params, b.MostProfiled, tc.top, tc.most)
			}
			if tb := b.OnType(tc.top); tb != nil && (!slices.Equal(tb.Single, b.Single) || !slices.Equal(tb.Multi, b.Multi)) {
				t.Errorf("top-level tables are not %s's", tc.top)
			}
			if len(b.Types) != len(tc.parts) {
				t.Fatalf("parts %+v, want %q", b.Types, tc.parts)
			}
			for i, typ := range tc.parts {
				tb := b.Types[i]
				if tb.GPUType != typ || tb.Params != ps[typ].params || tb.MostProfiled != ps[typ].mostReplicas() {
					t.Errorf("part %d: %s, most %d, want %s's", i, tb.GPUType, tb.MostProfiled, typ)
				}
			}
			// Each type's model reproduces that type's measurements
			// (within 5 %: Fit's regularisation), so a slower type bids
			// a lower throughput everywhere it was measured.
			for typ, p := range ps {
				for key, e := range p.entries {
					got := p.params.IterTime(key[0], key[1], float64(key[2]), 0)
					if math.Abs(got/e.StepTime-1) > 0.05 {
						t.Errorf("%s at %v: model step %v, measured %v", typ, key, got, e.StepTime)
					}
				}
			}
		})
	}
}

// TestBidWithoutModel: before any fit the bid has no model and no parts,
// only the initial batch tables.
func TestBidWithoutModel(t *testing.T) {
	cat, _ := builtin.Catalog()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 16, Limits: cat["cifar10"].Limits()}
	b := bidOn(spec, map[string]*typeProfile{"t4": profileFrom("t4", goodput.Params{}, 1, profileKey{1, 1, 128})}, goodput.GradStats{}, false)
	b.Session, b.Version = 1, 1
	if b.HasModel || b.Types != nil || len(b.Single) != 2 {
		t.Fatalf("bid %+v", b)
	}
	if err := state.CheckBid(&state.Job{ID: "j", Spec: spec}, &b); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkBidOn is the cost of building a bid (what a job actor does
// when its model moved) for a job with a model on 1, 2 and 3 GPU types:
// batch tables for up to 64 replicas per type.
func BenchmarkBidOn(b *testing.B) {
	cat, err := builtin.Catalog()
	if err != nil {
		b.Fatal(err)
	}
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 64, Limits: cat["cifar10"].Limits()}
	grad := cat["cifar10"].GradStats(float64(spec.Limits.InitBatch), 0)
	truth := goodput.Params{AlphaC: 0.02, BetaC: 0.0004, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.05, BetaR: 0.004, Gamma: 1.3}
	cfgs := []profileKey{{1, 1, 128}, {1, 2, 256}, {1, 4, 256}, {2, 8, 512}, {4, 32, 512}}
	for _, n := range []int{1, 2, 3} {
		ps := map[string]*typeProfile{}
		for i, typ := range []string{"a100", "rtx", "t4"}[:n] {
			p := truth
			p.AlphaC, p.BetaC = p.AlphaC*float64(i+1), p.BetaC*float64(i+1)
			tp := profileFrom(typ, p, 3, cfgs...)
			tp.params, tp.hasModel = p, true
			ps[typ] = tp
		}
		b.Run(fmt.Sprintf("types=%d", n), func(b *testing.B) {
			for b.Loop() {
				bidOn(spec, ps, grad, true)
			}
		})
	}
}
