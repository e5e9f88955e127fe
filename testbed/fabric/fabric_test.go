package fabric

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestRates(t *testing.T) {
	const b = 1e9
	cases := []struct {
		name  string
		over  float64
		racks []int
		flows []Flow
		want  []float64
	}{
		{"one job, uplink below its nodes", 4, []int{4, 4}, []Flow{{0: 2, 1: 2}}, []float64{b}},
		{"one job, non-blocking", 1, []int{4, 4}, []Flow{{0: 2, 1: 2}}, []float64{2 * b}},
		{"one node per rack is no faster than a node", 1, []int{4, 4}, []Flow{{0: 1, 1: 3}}, []float64{b}},
		{"two jobs share the uplinks", 4, []int{4, 4}, []Flow{{0: 2, 1: 2}, {0: 2, 1: 2}}, []float64{b / 2, b / 2}},
		// Rack 1 is shared by both, rack 2 only by the second; the first
		// is held to its one node, the second takes the rest.
		{"max-min: a capped flow leaves its share", 2, []int{4, 4, 4}, []Flow{{0: 1, 1: 1}, {1: 3, 2: 3}}, []float64{b, b}},
		{"max-min: bottleneck on one uplink", 4, []int{4, 4, 4}, []Flow{{0: 2, 1: 2}, {1: 2, 2: 2}, {2: 4, 0: 1}}, []float64{b / 2, b / 2, b / 2}},
		{"within one rack: own rate, no uplink", 4, []int{4, 4}, []Flow{{0: 3}, {0: 1, 1: 1}}, []float64{3 * b, b}},
	}
	for _, c := range cases {
		f, err := New(Config{NodeBandwidth: b, Oversubscription: c.over}, c.racks)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Rates(c.flows)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i := range got {
			if !near(got[i], c.want[i]) {
				t.Errorf("%s: rates %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}

// Random flows: no uplink carries more than it can, no flow goes faster
// than its nodes, and every flow is held by its nodes or by a full uplink
// on which no flow goes faster (max-min fairness). With no
// oversubscription and at most one flow per node, no uplink limits any
// flow, so nothing is slower than within one rack.
func TestRatesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		racks := 2 + rng.IntN(6)
		per := 1 + rng.IntN(8)
		sizes := make([]int, racks)
		free := make([]int, racks)
		for r := range sizes {
			sizes[r], free[r] = per, per
		}
		var flows []Flow
		for range 1 + rng.IntN(10) {
			fl := Flow{}
			for r := range racks {
				if free[r] > 0 && rng.IntN(2) == 0 {
					n := 1 + rng.IntN(free[r])
					fl[r] = n
					free[r] -= n
				}
			}
			if len(fl) > 0 {
				flows = append(flows, fl)
			}
		}
		over := 1 + 7*rng.Float64()
		if trial%3 == 0 {
			over = 1
		}
		f, err := New(Config{NodeBandwidth: 1, Oversubscription: over}, sizes)
		if err != nil {
			t.Fatal(err)
		}
		rates, err := f.Rates(flows)
		if err != nil {
			t.Fatal(err)
		}
		load := make([]float64, racks)
		for i, fl := range flows {
			if fl.Racks() < 2 {
				continue
			}
			for r := range fl {
				load[r] += rates[i]
			}
		}
		for r := range load {
			if load[r] > f.uplink[r]*(1+1e-9) {
				t.Fatalf("trial %d: uplink %d carries %v of %v", trial, r, load[r], f.uplink[r])
			}
		}
		for i, fl := range flows {
			c := f.cap(fl)
			if rates[i] > c*(1+1e-9) || !(rates[i] > 0) {
				t.Fatalf("trial %d: flow %v at %v, its nodes allow %v", trial, fl, rates[i], c)
			}
			if over == 1 && !near(rates[i], c) {
				t.Fatalf("trial %d: non-blocking, flow %v at %v below its %v", trial, fl, rates[i], c)
			}
			if fl.Racks() < 2 || near(rates[i], c) {
				continue
			}
			held := false
			for r := range fl {
				if load[r] < f.uplink[r]*(1-1e-9) {
					continue
				}
				top := true
				for k, o := range flows {
					if _, ok := o[r]; ok && o.Racks() > 1 && rates[k] > rates[i]*(1+1e-9) {
						top = false
					}
				}
				held = held || top
			}
			if !held {
				t.Fatalf("trial %d: flow %v at %v held by nothing (rates %v, loads %v)", trial, fl, rates[i], rates, load)
			}
		}
	}
}

func TestExtra(t *testing.T) {
	f, err := New(Config{NodeBandwidth: 1e9, Oversubscription: 4}, []int{4, 4, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	// 2 racks of 2 nodes: the ring moves the gradients once through each
	// uplink, at 1 GB/s instead of the nodes' 2.
	two := Flow{0: 2, 1: 2}
	if got := f.Extra(two, 1e9, 1e9); !near(got, 1-0.5) {
		t.Errorf("2 racks: %v, want 0.5", got)
	}
	// 4 racks of 4 nodes: 1.5 times the gradients, at 1 instead of 4.
	four := Flow{0: 4, 1: 4, 2: 4, 3: 4}
	if got := f.Extra(four, 1e9, 1e9); !near(got, 1.5-1.5/4) {
		t.Errorf("4 racks: %v, want %v", got, 1.5-1.5/4)
	}
	if f.Extra(Flow{0: 4}, 1e9, 1e9) != 0 || f.Extra(two, 1e9, 2e9) != 0 || f.Extra(two, 1e9, 0) != 0 {
		t.Error("one rack, full rate or no rate must add nothing")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Oversubscription: 0.5}, {Oversubscription: math.Inf(1)}, {Oversubscription: math.NaN()},
		{NodeBandwidth: -1, Oversubscription: 1}, {NodeBandwidth: math.Inf(1), Oversubscription: 1}} {
		if _, err := New(c, []int{1, 1}); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := New(Config{Oversubscription: 1}, []int{2, 0}); !errors.Is(err, ErrConfig) {
		t.Errorf("empty rack: %v", err)
	}
	f, err := New(Config{Oversubscription: 1}, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Rates([]Flow{{0: 1, 2: 1}}); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown rack: %v", err)
	}
}

func TestGradientBytes(t *testing.T) {
	for _, app := range []string{"imagenet", "cifar10", "deepspeech2", "yolov3", "bert", "ncf"} {
		if b, ok := GradientBytes(app); !ok || !(b > 1e6) {
			t.Errorf("%s: %v %v", app, b, ok)
		}
	}
	if _, ok := GradientBytes("gpt"); ok {
		t.Error("an unknown application has a size")
	}
}

func ExampleFabric_Extra() {
	// 4 racks of 4 nodes at 0.45 GB/s, uplinks 4:1 oversubscribed; a
	// ResNet-50 job on 2 nodes in each of 2 racks, alone.
	f, _ := New(Config{Oversubscription: 4}, []int{4, 4, 4, 4})
	job := Flow{0: 2, 1: 2}
	rates, _ := f.Rates([]Flow{job})
	bytes, _ := GradientBytes("imagenet")
	fmt.Printf("%.3f s more per step\n", f.Extra(job, bytes, rates[0]))
	// Output: 0.114 s more per step
}
