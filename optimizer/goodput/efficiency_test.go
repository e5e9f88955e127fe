package goodput

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestEfficiencyHandComputed(t *testing.T) {
	g := GradStats{GradSqr: 1, GradVar: 3}
	// At M = M0 the efficiency is exactly 1 and the gain 1.
	if e := g.Efficiency(128, 128); e != 1 {
		t.Errorf("Efficiency(M0) = %v, want 1", e)
	}
	// scale 2: gain = (3+1)/(3/2+1) = 1.6, efficiency 0.8.
	if gain := g.Gain(256, 128); !near(gain, 1.6) {
		t.Errorf("Gain = %v, want 1.6", gain)
	}
	if e := g.Efficiency(256, 128); !near(e, 0.8) {
		t.Errorf("Efficiency = %v, want 0.8", e)
	}
	// Equivalent form (phi + M0) / (phi + M) with phi = M0 * var / sqr.
	phi := 128.0 * 3
	if e := g.Efficiency(1000, 128); !near(e, (phi+128)/(phi+1000)) {
		t.Errorf("Efficiency = %v, want %v", e, (phi+128)/(phi+1000))
	}
}

func TestEfficiencyUnusableStats(t *testing.T) {
	for _, g := range []GradStats{{0, 0}, {-1, 2}, {0, 5}, {1, -1}, {math.NaN(), 1}, {math.Inf(1), 1}} {
		if e := g.Efficiency(512, 128); e != 1 {
			t.Errorf("%+v: Efficiency = %v, want 1", g, e)
		}
		if gain := g.Gain(512, 128); gain != 1 {
			t.Errorf("%+v: Gain = %v, want 1", g, gain)
		}
	}
}

// Efficiency is in (0, 1] for every M >= M0 and positive statistics.
func TestEfficiencyRange(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		g := GradStats{GradSqr: math.Exp(r.NormFloat64() * 5), GradVar: math.Exp(r.NormFloat64() * 5)}
		m0 := 1 + r.Float64()*1000
		m := m0 * (1 + r.Float64()*100)
		e := g.Efficiency(m, m0)
		if !(e > 0 && e <= 1+1e-12) {
			t.Fatalf("%+v M=%v M0=%v: efficiency %v outside (0,1]", g, m, m0, e)
		}
	}
}
