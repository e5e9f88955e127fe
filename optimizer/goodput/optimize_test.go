package goodput

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func testModel() Model {
	return Model{
		Params: testParams,
		Grad:   GradStats{GradSqr: 1, GradVar: 50},
		Limits: Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 16, MaxLocal: 256, Accumulation: true},
	}
}

func TestSplit(t *testing.T) {
	l := Limits{InitBatch: 128, MaxBatch: 4096, MinLocal: 16, MaxLocal: 256, Accumulation: true}
	cases := []struct {
		name  string
		k     int
		total float64
		m, s  int
	}{
		// K = 1 and M > M0: at least one accumulation step, even though
		// 200 fits in one micro-batch.
		{"single GPU above M0", 1, 200, 100, 1},
		{"single GPU at M0", 1, 128, 128, 0},
		{"fits in one micro-batch", 4, 512, 128, 0},
		// 2048 / 2 = 1024 local = 4 micro-batches of 256.
		{"needs accumulation", 2, 2048, 256, 3},
		// 1000 / 4 = 250 local: one micro-batch, ceil.
		{"ceil of local", 4, 1000, 250, 0},
		{"ceil with accumulation", 1, 1000, 250, 3},
	}
	for _, c := range cases {
		m, s := l.Split(c.k, c.total)
		if m != c.m || s != c.s {
			t.Errorf("%s: Split(%d, %v) = (%d, %d), want (%d, %d)", c.name, c.k, c.total, m, s, c.m, c.s)
		}
	}
	noAcc := l
	noAcc.Accumulation = false
	if m, s := noAcc.Split(1, 1000); m != 128 || s != 0 {
		t.Errorf("no accumulation, K=1: (%d, %d), want (128, 0)", m, s)
	}
	if m, s := noAcc.Split(3, 1000); m != 334 || s != 0 {
		t.Errorf("no accumulation, K=3: (%d, %d), want (334, 0)", m, s)
	}
}

func TestOptimizeBeatsEveryCandidate(t *testing.T) {
	md := testModel()
	for _, pl := range [][2]int{{1, 1}, {1, 2}, {1, 4}, {2, 8}, {4, 16}} {
		n, k := pl[0], pl[1]
		cfg, err := md.Optimize(n, k)
		if err != nil {
			t.Fatalf("Optimize(%d,%d): %v", n, k, err)
		}
		if cfg.TotalBatch != k*cfg.LocalBatch*(cfg.AccumSteps+1) {
			t.Errorf("total batch %d != K*m*(s+1)", cfg.TotalBatch)
		}
		if cfg.LocalBatch < md.Limits.MinLocal || cfg.LocalBatch > md.Limits.MaxLocal {
			t.Errorf("local batch %d outside limits", cfg.LocalBatch)
		}
		if !near(cfg.Goodput, md.Goodput(n, k, cfg.LocalBatch, cfg.AccumSteps)) {
			t.Errorf("reported goodput %v differs from Goodput()", cfg.Goodput)
		}
		// No admissible configuration on the geometric grid does better.
		lo := math.Max(128, float64(16*k))
		for i := 0; i < candidates; i++ {
			total := lo * math.Pow(4096/lo, float64(i)/(candidates-1))
			m, s := md.Limits.Split(k, total)
			if m < 16 || m > 256 {
				continue
			}
			if g := md.Goodput(n, k, m, s); g > cfg.Goodput*(1+1e-12) {
				t.Errorf("(%d,%d): candidate m=%d s=%d has goodput %v > best %v", n, k, m, s, g, cfg.Goodput)
			}
		}
		if cfg.Gain < 1 || cfg.Gain > float64(cfg.TotalBatch)/128+1e-9 {
			t.Errorf("gain %v outside [1, M/M0]", cfg.Gain)
		}
	}
}

func TestOptimizeErrors(t *testing.T) {
	md := testModel()
	if _, err := md.Optimize(2, 1); !errors.Is(err, ErrBadPlacement) {
		t.Errorf("K < N: %v, want ErrBadPlacement", err)
	}
	if _, err := md.Optimize(0, 0); !errors.Is(err, ErrBadPlacement) {
		t.Errorf("N = 0: %v, want ErrBadPlacement", err)
	}
	// 64 replicas at MinLocal 16 need a batch of 1024 > MaxBatch 512.
	tight := md
	tight.Limits.MaxBatch = 512
	if _, err := tight.Optimize(16, 64); !errors.Is(err, ErrNoConfig) {
		t.Errorf("infeasible: %v, want ErrNoConfig", err)
	}
	bad := md
	bad.Limits.MinLocal = 0
	if _, err := bad.Optimize(1, 1); !errors.Is(err, ErrBadLimits) {
		t.Errorf("bad limits: %v, want ErrBadLimits", err)
	}
	bad = md
	bad.Params.Gamma = 0
	if _, err := bad.Optimize(1, 1); !errors.Is(err, ErrBadParams) {
		t.Errorf("bad params: %v, want ErrBadParams", err)
	}
}

func TestSpeedupProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 200; trial++ {
		md := Model{
			Params: Params{
				AlphaC: 0.01 + r.Float64(), BetaC: 0.001 + r.Float64()*0.01,
				AlphaN: 0.01 + r.Float64(), BetaN: 0.001 + r.Float64()*0.1,
				AlphaR: 0.01 + r.Float64()*0.1, BetaR: 0.001 + r.Float64()*0.01,
				Gamma: 1 + r.Float64()*9,
			},
			Grad:   GradStats{GradSqr: r.Float64(), GradVar: r.Float64() * 100},
			Limits: Limits{InitBatch: 64, MaxBatch: 64 * (1 + r.IntN(100)), MinLocal: 8, MaxLocal: 8 + r.IntN(256), Accumulation: r.IntN(2) == 0},
		}
		baseN, baseK := 1, 1+r.IntN(4)
		sp, err := NewSpeedup(md, baseN, baseK)
		if err != nil {
			continue // infeasible base: covered by TestSpeedupErrors
		}
		if got := sp.At(baseN, baseK); !near(got, 1) {
			t.Fatalf("speedup at base = %v, want 1", got)
		}
		for n := 1; n <= 20; n += 3 {
			for k := n; k <= 80; k += 7 {
				v := sp.At(n, k)
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("At(%d,%d) = %v", n, k, v)
				}
				if again := sp.At(n, k); again != v {
					t.Fatalf("memoised At(%d,%d) = %v then %v", n, k, v, again)
				}
			}
		}
		if sp.At(0, 0) != 0 || sp.At(3, 2) != 0 || sp.At(1, 0) != 0 {
			t.Fatal("impossible placements must have speedup 0")
		}
	}
}

func TestSpeedupErrors(t *testing.T) {
	md := testModel()
	if _, err := NewSpeedup(md, 2, 1); !errors.Is(err, ErrBadPlacement) {
		t.Errorf("bad base: %v", err)
	}
	tight := md
	tight.Limits.MaxBatch = 128
	if _, err := NewSpeedup(tight, 16, 64); !errors.Is(err, ErrNoConfig) {
		t.Errorf("infeasible base: %v", err)
	}
}

func TestSpeedupLookupAllocs(t *testing.T) {
	sp, err := NewSpeedup(testModel(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	sp.At(2, 8)
	if a := testing.AllocsPerRun(1000, func() { sp.At(2, 8) }); a != 0 {
		t.Errorf("memoised lookup allocates %v times", a)
	}
	if a := testing.AllocsPerRun(100, func() { sp.At(20, 100) }); a != 0 {
		t.Errorf("unmemoised lookup allocates %v times", a)
	}
}

func BenchmarkOptimize(b *testing.B) {
	md := testModel()
	for b.Loop() {
		md.optimize(2, 8)
	}
}

func BenchmarkSpeedupLookup(b *testing.B) {
	sp, err := NewSpeedup(testModel(), 1, 1)
	if err != nil {
		b.Fatal(err)
	}
	sp.At(2, 8)
	b.ReportAllocs()
	for b.Loop() {
		sp.At(2, 8)
	}
}

// Across racks: one rack and an unknown cross-rack term look up At; a
// known term gives the cross-rack optimum, never above the in-rack one
// and lower the more racks are spanned, memoised without allocating after
// the first lookup.
func TestSpeedupAcrossRacks(t *testing.T) {
	blind, err := NewSpeedup(testModel(), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	md := testModel()
	md.Params.AlphaX = 4 * md.Params.AlphaN
	aware, err := NewSpeedup(md, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 20; n += 3 {
		for k := n; k <= 80; k += 7 {
			if got, want := blind.AtRacks(2, n, k), blind.At(n, k); n >= 2 && got != want {
				t.Errorf("unknown terms: AtRacks(2,%d,%d) = %v, At = %v", n, k, got, want)
			}
			if got, want := aware.AtRacks(1, n, k), aware.At(n, k); got != want {
				t.Errorf("one rack: AtRacks(1,%d,%d) = %v, At = %v", n, k, got, want)
			}
			if n < 2 {
				continue
			}
			x := aware.AtRacks(2, n, k)
			cfg, err := md.OptimizeRacks(2, n, k)
			if err == nil && !near(x, cfg.Goodput/aware.BaseGoodput()) {
				t.Errorf("AtRacks(2,%d,%d) = %v, OptimizeRacks says %v", n, k, x, cfg.Goodput/aware.BaseGoodput())
			}
			if x > aware.At(n, k) {
				t.Errorf("AtRacks(2,%d,%d) = %v above the in-rack %v", n, k, x, aware.At(n, k))
			}
			if n >= 3 {
				if x3 := aware.AtRacks(3, n, k); x3 > x || (x > 0 && x3 == x) {
					t.Errorf("AtRacks(3,%d,%d) = %v, AtRacks(2) = %v: three racks cost no more than two", n, k, x3, x)
				}
			}
		}
	}
	if aware.AtRacks(2, 1, 4) != 0 || aware.AtRacks(3, 2, 4) != 0 {
		t.Error("more racks than nodes must have speedup 0")
	}
	if x, in := aware.AtRacks(2, 2, 8), aware.At(2, 8); !(x < in) {
		t.Errorf("a 4x slower cross-rack link costs nothing: %v vs %v", x, in)
	}
	if a := testing.AllocsPerRun(1000, func() { aware.AtRacks(2, 2, 8) }); a != 0 {
		t.Errorf("memoised cross-rack lookup allocates %v times", a)
	}
	if _, err := md.OptimizeRacks(3, 2, 8); !errors.Is(err, ErrBadPlacement) {
		t.Errorf("3 racks on 2 nodes: %v", err)
	}
}
