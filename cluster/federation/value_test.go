package federation

import (
	"math"
	"slices"
	"testing"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

func TestCurve(t *testing.T) {
	linear := func(k int) float64 { return float64(k) }
	// A job that gains nothing from its second GPU but 1.4 from the
	// third and fourth together: its hull averages them.
	lumpy := func(k int) float64 { return []float64{0, 1, 1, 2.4, 2.6}[k] }
	// A job whose speedup falls beyond 2 GPUs is worth no more GPUs.
	peaked := func(k int) float64 { return []float64{0, 1, 1.5, 1.2, 1.0}[k] }
	tests := []struct {
		name  string
		ds    []Demand
		limit int
		want  []float64
	}{
		{"no jobs", nil, 8, nil},
		{"linear job capped", []Demand{{Max: 3, Speedup: linear}}, 8, []float64{1, 1, 1}},
		{"hull", []Demand{{Max: 4, Speedup: lumpy}}, 8, []float64{1, 0.7, 0.7, 0.2}},
		{"peaked", []Demand{{Max: 4, Speedup: peaked}}, 8, []float64{1, 0.5}},
		{"merged largest first, limited", []Demand{{Max: 4, Speedup: peaked}, {Max: 2, Speedup: linear}}, 3, []float64{1, 1, 1}},
		{"no max", []Demand{{Max: 0, Speedup: linear}}, 8, nil},
	}
	for _, tt := range tests {
		got := Curve(tt.ds, 1, tt.limit)
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %v, want %v", tt.name, got, tt.want)
		}
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-12 {
				t.Fatalf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
	}
}

// A job with a goodput model is valued by it: its first GPU is worth one
// (the scale), later ones less, never more than one each (a model with
// sublinear scaling), and the curve never increases.
func TestDemandOfModel(t *testing.T) {
	md := &goodput.Model{
		Params: goodput.Params{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.1, BetaR: 0.01, Gamma: 1.5},
		Grad:   goodput.GradStats{GradSqr: 1, GradVar: 5},
		Limits: goodput.Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 16, MaxLocal: 256, Accumulation: true},
	}
	c := Curve([]Demand{DemandOf(optimizer.Job{MaxReplicas: 16, Model: md}, 4)}, 1, 64)
	if len(c) == 0 || math.Abs(c[0]-1) > 1e-9 {
		t.Fatalf("curve %v: want the first GPU worth 1", c)
	}
	if !slices.IsSortedFunc(c, func(a, b float64) int { return -cmpf(a, b) }) {
		t.Fatalf("curve %v increases", c)
	}
	for _, v := range c {
		if v > 1+1e-9 {
			t.Fatalf("curve %v: a GPU worth more than one", c)
		}
	}
	// Without a model a job is valued linearly up to its maximum.
	if got := Curve([]Demand{DemandOf(optimizer.Job{MaxReplicas: 2}, 4)}, 1, 64); len(got) != 2 || math.Abs(got[0]-1) > 1e-12 || math.Abs(got[1]-1) > 1e-12 {
		t.Fatalf("no model: %v", got)
	}
}

// Under Pollux's exponent p = -1 a job's first GPU is worth about a
// thousand times its second (a job without GPUs dominates the power
// mean), and a job's k-th GPU 1/(k-1) - 1/k of a linear job's; two jobs'
// first GPUs come before either's second.
func TestCurveFairness(t *testing.T) {
	linear := func(k int) float64 { return float64(k) }
	got := Curve([]Demand{{Max: 3, Speedup: linear}, {Max: 2, Speedup: linear}}, -1, 10)
	e := epsilon
	first := 1/e - 1/(1+e)
	want := []float64{first, first, 1/(1+e) - 1/(2+e), 1/(1+e) - 1/(2+e), 1/(2+e) - 1/(3+e)}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	// p = 0 is the logarithm: equal ratios are worth the same.
	lg := Curve([]Demand{{Max: 4, Speedup: linear}}, 0, 10)
	if math.Abs(lg[1]-math.Log((2+e)/(1+e))) > 1e-12 {
		t.Fatalf("log curve %v", lg)
	}
}

func cmpf(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
