package goodput

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/diff/fd"
)

// synthetic returns profile points generated exactly by p over a grid of
// placements and batches, with multiplicative noise of the given size.
func synthetic(p Params, noise float64, r *rand.Rand) []ProfilePoint {
	var pts []ProfilePoint
	for _, pl := range [][2]int{{1, 1}, {1, 2}, {1, 4}, {2, 4}, {2, 8}, {4, 16}} {
		for _, m := range []int{8, 16, 32, 64} {
			acc := p.AccumTime(float64(m))
			step := p.SyncTime(pl[0], pl[1], float64(m))
			if noise > 0 {
				acc *= 1 + noise*r.NormFloat64()
				step *= 1 + noise*r.NormFloat64()
			}
			pts = append(pts, ProfilePoint{Nodes: pl[0], Replicas: pl[1], LocalBatch: m, AccumTime: acc, StepTime: step})
		}
	}
	return pts
}

func meanRelErr(p Params, pts []ProfilePoint) float64 {
	s := 0.0
	for _, q := range pts {
		s += math.Abs(p.SyncTime(q.Nodes, q.Replicas, float64(q.LocalBatch))-q.StepTime) / q.StepTime
	}
	return s / float64(len(pts))
}

func TestFitRecoversSyntheticModel(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	pts := synthetic(truth, 0, nil)
	got, err := Fit(pts)
	if err != nil {
		t.Fatal(err)
	}
	if e := meanRelErr(got, pts); e > 0.02 {
		t.Errorf("mean relative error %v on noiseless data; fitted %+v", e, got)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("fitted params invalid: %v", err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	noisy := synthetic(truth, 0.05, r)
	got, err = Fit(noisy)
	if err != nil {
		t.Fatal(err)
	}
	if e := meanRelErr(got, synthetic(truth, 0, nil)); e > 0.05 {
		t.Errorf("mean relative error %v against truth with 5%% noise", e)
	}
}

func TestFitPinning(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.5}
	point := func(n, k, m int) ProfilePoint {
		return ProfilePoint{Nodes: n, Replicas: k, LocalBatch: m,
			AccumTime: truth.AccumTime(float64(m)), StepTime: truth.SyncTime(n, k, float64(m))}
	}
	// One distinct m, single GPU only: alpha_c pinned to mean/2, every
	// network term at the lower bound (inter-node raised to 1.1x intra).
	p, err := Fit([]ProfilePoint{point(1, 1, 32), point(1, 1, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if want := truth.AccumTime(32) / 2; !near(p.AlphaC, want) {
		t.Errorf("alpha_c = %v, want pinned %v", p.AlphaC, want)
	}
	if p.AlphaR != lowerBound || p.BetaR != lowerBound {
		t.Errorf("intra-node terms not pinned: %v %v", p.AlphaR, p.BetaR)
	}
	if !near(p.AlphaN, 1.1*lowerBound) || !near(p.BetaN, 1.1*lowerBound) {
		t.Errorf("inter-node terms %v %v, want 1.1 * lower bound", p.AlphaN, p.BetaN)
	}
	// Single node, K <= 2: retrogression pinned, inter-node raised to
	// at least 1.1 times the intra-node terms.
	p, err = Fit([]ProfilePoint{point(1, 1, 16), point(1, 2, 16), point(1, 1, 64), point(1, 2, 64)})
	if err != nil {
		t.Fatal(err)
	}
	if p.BetaR != lowerBound || p.BetaN < 1.1*p.BetaR*(1-1e-12) {
		t.Errorf("beta_r = %v (want pinned), beta_n = %v", p.BetaR, p.BetaN)
	}
	if p.AlphaN < 1.1*p.AlphaR*(1-1e-12) {
		t.Errorf("alpha_n = %v below 1.1 * alpha_r = %v", p.AlphaN, 1.1*p.AlphaR)
	}
	if p.AlphaR <= lowerBound {
		t.Errorf("alpha_r = %v: should be fitted from the K=2 points", p.AlphaR)
	}
}

// TestFitOneLargeBatch: one local batch much larger than the fixed
// start's scale (0.01 s per sample against 0.5 ms measured) at 1 and 2
// replicas. Fit (cold) and Refit (from a fit whose beta_c sank to its
// bound, as Fit gave before it also started from the data's scale)
// reproduce the measured accumulation time, not just the pinned alpha_c.
func TestFitOneLargeBatch(t *testing.T) {
	pts := []ProfilePoint{
		{Nodes: 1, Replicas: 1, LocalBatch: 128, AccumTime: 0.0712, StepTime: 0.0712},
		{Nodes: 1, Replicas: 2, LocalBatch: 128, AccumTime: 0.0712, StepTime: 0.09},
	}
	stuck := Params{AlphaC: 0.0356, BetaC: 7.5e-7, AlphaN: 0.061, BetaN: 1.1e-8, AlphaR: 0.055, BetaR: 1e-8, Gamma: 1.00005}
	cold, err := Fit(pts)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := Refit(pts, stuck)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]Params{"fit": cold, "refit": warm} {
		if got := p.AccumTime(128); math.Abs(got/0.0712-1) > 0.01 {
			t.Errorf("%s: accumulation time %v at m = 128, measured 0.0712 (%+v)", name, got, p)
		}
		if got := p.SyncTime(1, 2, 128); math.Abs(got/0.09-1) > 0.01 {
			t.Errorf("%s: step time %v at K = 2, measured 0.09", name, got)
		}
	}
}

func TestFitErrors(t *testing.T) {
	if _, err := Fit(nil); !errors.Is(err, ErrNoPoints) {
		t.Errorf("empty: %v", err)
	}
	bad := []ProfilePoint{
		{Nodes: 1, Replicas: 1, LocalBatch: 8, AccumTime: 0, StepTime: 1},
		{Nodes: 1, Replicas: 1, LocalBatch: 8, AccumTime: 1, StepTime: -1},
		{Nodes: 1, Replicas: 1, LocalBatch: 8, AccumTime: math.NaN(), StepTime: 1},
		{Nodes: 1, Replicas: 1, LocalBatch: 8, AccumTime: 1, StepTime: math.Inf(1)},
		{Nodes: 2, Replicas: 1, LocalBatch: 8, AccumTime: 1, StepTime: 1},
		{Nodes: 0, Replicas: 0, LocalBatch: 8, AccumTime: 1, StepTime: 1},
		{Nodes: 1, Replicas: 1, LocalBatch: 0, AccumTime: 1, StepTime: 1},
		{Nodes: 2, Replicas: 4, LocalBatch: 8, AccumTime: 1, StepTime: 1, Racks: 3},
		{Nodes: 2, Replicas: 4, LocalBatch: 8, AccumTime: 1, StepTime: 1, Racks: -1},
	}
	for _, p := range bad {
		if _, err := Fit([]ProfilePoint{p}); !errors.Is(err, ErrBadPoint) {
			t.Errorf("Fit(%+v) = %v, want ErrBadPoint", p, err)
		}
	}
}

// The analytic gradient of the loss agrees with finite differences.
func TestFitGradient(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	pr := newFitProblem(synthetic(truth, 0.1, rand.New(rand.NewPCG(1, 1))))
	if len(pr.free) != 7 {
		t.Fatalf("%d free parameters, want 7", len(pr.free))
	}
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 20; trial++ {
		x := pr.encode(truth.slice())
		for i := range x {
			x[i] += r.NormFloat64() * 0.5
		}
		want := fd.Gradient(nil, pr.f, x, &fd.Settings{Formula: fd.Central, Step: 1e-6})
		got := make([]float64, 7)
		pr.grad(got, x)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-5*math.Max(1, math.Abs(want[i])) {
				t.Errorf("x=%v: d/dx%d analytic %v, numeric %v", x, i, got[i], want[i])
			}
		}
	}
}

// crossRackPoints are points of truth on one rack (as synthetic) plus
// placements across 2 and 4 racks.
func crossRackPoints(truth Params, noise float64, r *rand.Rand) []ProfilePoint {
	pts := synthetic(truth, noise, r)
	for _, pl := range [][3]int{{2, 2, 2}, {2, 2, 8}, {4, 4, 16}} {
		for _, m := range []int{8, 16, 32, 64} {
			acc := truth.AccumTime(float64(m))
			step := truth.SyncTimeRacks(pl[0], pl[1], pl[2], float64(m))
			if noise > 0 {
				acc *= 1 + noise*r.NormFloat64()
				step *= 1 + noise*r.NormFloat64()
			}
			pts = append(pts, ProfilePoint{Racks: pl[0], Nodes: pl[1], Replicas: pl[2], LocalBatch: m, AccumTime: acc, StepTime: step})
		}
	}
	return pts
}

// Points measured across racks identify the cross-rack term, which then
// predicts such placements (over 2 and 4 racks); the in-rack terms keep
// their meaning.
func TestFitCrossRack(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8, AlphaX: 0.4}
	pts := crossRackPoints(truth, 0, nil)
	got, err := Fit(pts)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("fitted params invalid: %v", err)
	}
	if mean, worst := StepTimeErrors(got, pts); mean > 0.02 || worst > 0.1 {
		t.Errorf("step-time error mean %v, worst %v on noiseless points; fitted %+v", mean, worst, got)
	}
	if got.AlphaX < 0.3 || got.AlphaX > 0.5 {
		t.Errorf("fitted alpha_x = %v, truth 0.4 (%+v)", got.AlphaX, got)
	}
	noisy := crossRackPoints(truth, 0.05, rand.New(rand.NewPCG(7, 7)))
	got, err = Fit(noisy)
	if err != nil {
		t.Fatal(err)
	}
	if mean, _ := StepTimeErrors(got, pts); mean > 0.05 {
		t.Errorf("step-time error %v against truth with 5%% noise; fitted %+v", mean, got)
	}
	// Without points across racks the term stays unknown and the fit is
	// the in-rack one, bit for bit.
	in := synthetic(truth, 0, nil)
	a, err := Fit(in)
	if err != nil {
		t.Fatal(err)
	}
	truth.AlphaX = 0
	b, err := Fit(synthetic(truth, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	if a.AlphaX != 0 || a != b {
		t.Errorf("in-rack fit %+v, want %+v with alpha_x unknown", a, b)
	}
}

// The gradient also holds with the cross-rack term free.
func TestFitGradientCrossRack(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8, AlphaX: 0.2}
	pr := newFitProblem(crossRackPoints(truth, 0.1, rand.New(rand.NewPCG(1, 1))))
	if len(pr.free) != nParams {
		t.Fatalf("%d free parameters, want %d", len(pr.free), nParams)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 20; trial++ {
		x := pr.encode(truth.slice())
		for i := range x {
			x[i] += r.NormFloat64() * 0.5
		}
		want := fd.Gradient(nil, pr.f, x, &fd.Settings{Formula: fd.Central, Step: 1e-6})
		got := make([]float64, len(x))
		pr.grad(got, x)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1e-5*math.Max(1, math.Abs(want[i])) {
				t.Errorf("x=%v: d/dx%d analytic %v, numeric %v", x, i, got[i], want[i])
			}
		}
	}
}

func FuzzFit(f *testing.F) {
	f.Add(1, 1, 8, 0.1, 0.2, 2, 8, 32, 0.3, 0.9, 0)
	f.Add(1, 4, 16, 1e-9, 1e9, 16, 64, 1, 1e-300, 1e300, 0)
	f.Add(1, 4, 16, 0.1, 0.2, 4, 16, 16, 0.1, 0.9, 2)
	f.Fuzz(func(t *testing.T, n1, k1, m1 int, a1, s1 float64, n2, k2, m2 int, a2, s2 float64, r2 int) {
		pts := []ProfilePoint{
			{Nodes: n1, Replicas: k1, LocalBatch: m1, AccumTime: a1, StepTime: s1},
			{Nodes: n2, Replicas: k2, LocalBatch: m2, AccumTime: a2, StepTime: s2, Racks: r2},
		}
		p, err := Fit(pts)
		if err != nil {
			return
		}
		for _, v := range p.slice() {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite fit %+v from %+v", p, pts)
			}
		}
	})
}

func BenchmarkFit30(b *testing.B) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	pts := synthetic(truth, 0.05, rand.New(rand.NewPCG(9, 9)))[:24]
	pts = append(pts, synthetic(truth, 0.05, rand.New(rand.NewPCG(8, 8)))[18:24]...)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Fit(pts); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRefitWarmStartsFromAnEarlierFit(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	r := rand.New(rand.NewPCG(5, 6))
	all := synthetic(truth, 0.03, r)
	// The job first ran on one node, then was profiled on more.
	early, err := Fit(all[:12])
	if err != nil {
		t.Fatal(err)
	}
	cold, err := Fit(all)
	if err != nil {
		t.Fatal(err)
	}
	warm, err := Refit(all, early)
	if err != nil {
		t.Fatal(err)
	}
	pr := newFitProblem(all)
	if fw, fc := pr.objective(warm.slice()), pr.objective(cold.slice()); fw > fc*1.05+1e-9 {
		t.Errorf("warm refit loss %v, cold fit %v", fw, fc)
	}
	if e := meanRelErr(warm, synthetic(truth, 0, nil)); e > 0.05 {
		t.Errorf("warm refit error %v against truth", e)
	}
	// Never worse than where it started.
	again, err := Refit(all, warm)
	if err != nil || pr.objective(again.slice()) > pr.objective(warm.slice())+1e-12 {
		t.Errorf("refit of a fit got worse: %v", err)
	}
	// Invalid earlier parameters fall back to a cold fit.
	if p, err := Refit(all, Params{}); err != nil || p.Validate() != nil {
		t.Errorf("refit from nothing: %+v, %v", p, err)
	}
	if _, err := Refit(nil, warm); !errors.Is(err, ErrNoPoints) {
		t.Errorf("no points: %v", err)
	}
}

func BenchmarkRefit30(b *testing.B) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8}
	pts := synthetic(truth, 0.05, rand.New(rand.NewPCG(9, 9)))[:24]
	pts = append(pts, synthetic(truth, 0.05, rand.New(rand.NewPCG(8, 8)))[18:24]...)
	prev, err := Fit(pts[:29])
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Refit(pts, prev); err != nil {
			b.Fatal(err)
		}
	}
}

// A model refitted once points across racks arrive learns the
// cross-rack term its earlier fit did not know (a warm start from the
// term's floor would never move it).
func TestRefitLearnsANewCrossRackTerm(t *testing.T) {
	truth := Params{AlphaC: 0.05, BetaC: 0.004, AlphaN: 0.3, BetaN: 0.02, AlphaR: 0.06, BetaR: 0.005, Gamma: 1.8, AlphaX: 0.4}
	in := synthetic(truth, 0, nil)
	prev, err := Fit(in)
	if err != nil {
		t.Fatal(err)
	}
	if prev.CrossRackKnown() {
		t.Fatalf("in-rack fit knows a cross-rack term: %+v", prev)
	}
	got, err := Refit(crossRackPoints(truth, 0, nil), prev)
	if err != nil {
		t.Fatal(err)
	}
	if got.AlphaX < 0.3 || got.AlphaX > 0.5 {
		t.Errorf("refitted alpha_x = %v, truth 0.4 (%+v)", got.AlphaX, got)
	}
}
