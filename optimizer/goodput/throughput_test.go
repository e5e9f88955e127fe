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
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 0.5, 0},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 11, 0},
		{math.NaN(), 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0},
		{math.Inf(1), 0.01, 0.1, 0.01, 0.1, 0.01, 1, 0},
		{0.1, -0.01, 0.1, 0.01, 0.1, 0.01, 1, 0},
		// The cross-rack term: unknown (zero) or finite and positive.
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, math.NaN()},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, math.Inf(1)},
		{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1, -0.4},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrBadParams) {
			t.Errorf("Validate(%+v) = %v, want ErrBadParams", p, err)
		}
	}
	if err := testParams.Validate(); err != nil {
		t.Errorf("Validate(testParams) = %v", err)
	}
	x := testParams
	x.AlphaX = 0.4
	if err := x.Validate(); err != nil {
		t.Errorf("Validate(testParams with a cross-rack term) = %v", err)
	}
}

// Across racks a known term adds alpha_x * 2(r-1)/r to the synchronised
// step (capped at one rack per node); an unknown term and one rack add
// nothing.
func TestCrossRackTime(t *testing.T) {
	p := testParams
	for _, c := range [][2]int{{1, 1}, {1, 4}, {2, 2}, {2, 8}} {
		for _, r := range []int{0, 1, 2, 4} {
			if got, want := p.SyncTimeRacks(r, c[0], c[1], 10), p.SyncTime(c[0], c[1], 10); got != want {
				t.Errorf("unknown cross-rack term: SyncTimeRacks(%d,%d,%d) = %v, want %v", r, c[0], c[1], got, want)
			}
		}
	}
	x := p
	x.AlphaX = 0.4
	cases := []struct {
		r, n int
		want float64
	}{{0, 4, 0}, {1, 4, 0}, {2, 4, 0.4}, {3, 4, 0.4 * 4 / 3}, {4, 4, 0.6}, {4, 2, 0.4}, {2, 1, 0}}
	for _, c := range cases {
		if got := x.SyncTimeRacks(c.r, c.n, 8, 10) - x.SyncTime(c.n, 8, 10); !near(got, c.want) {
			t.Errorf("SyncTimeRacks(%d racks, %d nodes) adds %v, want %v", c.r, c.n, got, c.want)
		}
	}
	if got, want := x.IterTimeRacks(2, 2, 8, 10, 1), x.IterTime(2, 8, 10, 1)+0.4; !near(got, want) {
		t.Errorf("IterTimeRacks(2,2,8,10,1) = %v, want %v", got, want)
	}
	if RackShare(1) != 0 || RackShare(2) != 1 || !near(RackShare(4), 1.5) {
		t.Errorf("RackShare(1, 2, 4) = %v, %v, %v", RackShare(1), RackShare(2), RackShare(4))
	}
}
