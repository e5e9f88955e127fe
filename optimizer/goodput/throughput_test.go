package goodput

import (
	"errors"
	"math"
	"testing"
)

var testParams = Params{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.2, BetaN: 0.02, AlphaR: 0.05, BetaR: 0.005, Gamma: 1}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestNetworkTime(t *testing.T) {
	cases := []struct {
		name string
		n, k int
		want float64
	}{
		// K = 1: no network term at all (1e-8 for both terms).
		{"single GPU", 1, 1, 1e-8 + 1e-8*1e-8},
		// N = 1, K = 2: intra-node, retrogression max(0, 1e-8).
		{"two local GPUs", 1, 2, 0.05 + 0.005*1e-8},
		{"four local GPUs", 1, 4, 0.05 + 0.005*2},
		{"two nodes, two GPUs", 2, 2, 0.2 + 0.02*1e-8},
		{"two nodes, eight GPUs", 2, 8, 0.2 + 0.02*6},
	}
	for _, c := range cases {
		if got := testParams.NetworkTime(c.n, c.k); !near(got, c.want) {
			t.Errorf("%s: NetworkTime(%d,%d) = %v, want %v", c.name, c.n, c.k, got, c.want)
		}
	}
}

func TestSyncTimeGamma(t *testing.T) {
	p := testParams
	m := 10.0 // accum = 0.1 + 0.1 = 0.2
	net := p.NetworkTime(1, 4)
	// gamma = 1 adds compute and network.
	if got := p.SyncTime(1, 4, m); !near(got, 0.2+net) {
		t.Errorf("gamma=1: %v, want %v", got, 0.2+net)
	}
	// gamma = 2 is the Euclidean norm.
	p.Gamma = 2
	if got, want := p.SyncTime(1, 4, m), math.Hypot(0.2, net); !near(got, want) {
		t.Errorf("gamma=2: %v, want %v", got, want)
	}
	// large gamma approaches the max.
	p.Gamma = 10
	got := p.SyncTime(1, 4, m)
	if mx := math.Max(0.2, net); got < mx || got > mx*1.01 {
		t.Errorf("gamma=10: %v, want within 1%% above %v", got, mx)
	}
	// K = 1: sync time is just compute.
	if got := p.SyncTime(1, 1, m); math.Abs(got-0.2) > 1e-7 {
		t.Errorf("K=1: %v, want 0.2", got)
	}
}

func TestIterTimeAndThroughput(t *testing.T) {
	p := testParams
	// s = 3 accumulation steps of 0.2 s plus one synchronised step.
	want := 3*0.2 + 0.2 + p.NetworkTime(2, 8)
	if got := p.IterTime(2, 8, 10, 3); !near(got, want) {
		t.Errorf("IterTime = %v, want %v", got, want)
	}
	if got := p.Throughput(2, 8, 10, 3); !near(got, 8*10*4/want) {
		t.Errorf("Throughput = %v, want %v", got, 8*10*4/want)
	}
}

func TestParamsValidate(t *testing.T) {
	bad := []Params{
		{},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 0.5, 0, 0},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 11, 0, 0},
		{math.NaN(), 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0, 0},
		{math.Inf(1), 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0, 0},
		{0.1, -0.01, 0.1, 0.01, 0.1, 0.01, 1, 0, 0},
		// Cross-rack terms: both unknown (zero) or both positive.
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0.4, 0},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0, 0.04},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, math.NaN(), 0.04},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0.4, math.Inf(1)},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, -0.4, 0.04},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrBadParams) {
			t.Errorf("Validate(%+v) = %v, want ErrBadParams", p, err)
		}
	}
	if err := testParams.Validate(); err != nil {
		t.Errorf("Validate(testParams) = %v", err)
	}
	if err := testParams.WithCrossRack(4).Validate(); err != nil {
		t.Errorf("Validate(testParams with cross-rack terms) = %v", err)
	}
}

// Across racks the network term is the cross-rack one when it is known,
// the inter-node one otherwise; within one rack nothing changes.
func TestNetworkTimeRacks(t *testing.T) {
	p := testParams
	for _, c := range [][2]int{{1, 1}, {1, 4}, {2, 2}, {2, 8}} {
		for _, r := range []int{0, 1, 2} {
			if got, want := p.NetworkTimeRacks(r, c[0], c[1]), p.NetworkTime(c[0], c[1]); got != want {
				t.Errorf("unknown cross-rack terms: NetworkTimeRacks(%d,%d,%d) = %v, want %v", r, c[0], c[1], got, want)
			}
		}
	}
	x := p.WithCrossRack(4)
	if x.AlphaX != 4*p.AlphaN || x.BetaX != 4*p.BetaN {
		t.Errorf("WithCrossRack(4) = %+v", x)
	}
	if got, want := x.NetworkTimeRacks(2, 2, 8), 0.8+0.08*6; !near(got, want) {
		t.Errorf("cross-rack NetworkTimeRacks(2,2,8) = %v, want %v", got, want)
	}
	if got, want := x.NetworkTimeRacks(1, 2, 8), p.NetworkTime(2, 8); got != want {
		t.Errorf("in-rack NetworkTimeRacks(1,2,8) = %v, want %v", got, want)
	}
	// Known terms are kept; ratios of at most 1 change nothing.
	if y := x.WithCrossRack(9); y != x {
		t.Errorf("WithCrossRack overwrote known terms: %+v", y)
	}
	for _, ratio := range []float64{0, 0.5, 1, math.NaN(), math.Inf(1)} {
		if y := p.WithCrossRack(ratio); y != p {
			t.Errorf("WithCrossRack(%v) = %+v", ratio, y)
		}
	}
	if got := x.IterTimeRacks(2, 2, 8, 10, 1); !(got > x.IterTime(2, 8, 10, 1)) {
		t.Errorf("an iteration across racks (%v) is not slower than within one (%v)", got, x.IterTime(2, 8, 10, 1))
	}
}
