package optimizer

import (
	"math"
	"testing"
)

func TestPickCDF(t *testing.T) {
	w := (&problem{}).newWorker()
	for _, f := range []int{1, 2, 5, 16, 1000} {
		p := 1 / float64(f)
		w.pickCDF(f, p)
		last := w.cdf[len(w.cdf)-1]
		if math.Abs(last-1) > 1e-9 {
			t.Errorf("f=%d: cdf ends at %v", f, last)
		}
		mean, prev := 0.0, 0.0
		for c, v := range w.cdf {
			if v < prev {
				t.Fatalf("f=%d: cdf decreases at %d", f, c)
			}
			mean += float64(c) * (v - prev)
			prev = v
		}
		if math.Abs(mean-1) > 1e-6 { // binomial(f, 1/f) has mean 1
			t.Errorf("f=%d: mean hits %v, want 1", f, mean)
		}
	}
	// Draws follow the table.
	w.reseed(1, 2, 3)
	w.pickCDF(16, 1.0/16)
	n, sum := 20000, 0
	for range n {
		sum += w.picks()
	}
	if m := float64(sum) / float64(n); math.Abs(m-1) > 0.05 {
		t.Errorf("mean of %d draws %v, want ~1", n, m)
	}
}

func TestThreshold(t *testing.T) {
	for _, tt := range []struct {
		p    float64
		want uint64
	}{{-1, 0}, {0, 0}, {0.5, 1 << 63}, {1, math.MaxUint64}, {math.Nextafter(1, 0), math.MaxUint64 - 2047}} {
		if got := threshold(tt.p); got != tt.want {
			t.Errorf("threshold(%v) = %d, want %d", tt.p, got, tt.want)
		}
	}
}

// The search's first population: with the current allocation among the
// seeds it is in the final population of a search of no generations;
// without it (Pollux.PreviousOnly once a previous population exists)
// the search starts from the previous population alone, here every job
// unallocated, and does not come back to the current allocation of all
// twelve jobs; without a previous population the current allocation is
// seeded either way.
func TestEvolveSeedsCurrentOnlyWhenAsked(t *testing.T) {
	snap, err := Synthetic(64, 4, 12, 7)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := NewObjective(snap, DefaultPowerMean)
	if err != nil {
		t.Fatal(err)
	}
	pr := newProblem(obj)
	current := func(final [][]Placement) bool {
		for _, alloc := range final {
			same := true
			for j, pl := range alloc {
				if !normalize(pl).Equal(normalize(obj.current[j])) {
					same = false
					break
				}
			}
			if same {
				return true
			}
		}
		return false
	}
	empty := [][]Placement{make([]Placement, pr.jobs)}
	if _, final, _, _ := evolve(pr, empty, true, 16, 0, 1, 3); !current(final) {
		t.Error("seeded with the current allocation: not in the final population")
	}
	if _, final, _, _ := evolve(pr, empty, false, 16, 0, 1, 3); current(final) {
		t.Error("seeded with the previous population alone: the current allocation is in the final population")
	}
	// The first round has no previous population: the current allocation
	// is seeded whatever is asked.
	if _, final, _, _ := evolve(pr, nil, false, 16, 0, 1, 3); !current(final) {
		t.Error("no previous population: the current allocation is not in the final population")
	}
}
