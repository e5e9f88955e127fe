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
