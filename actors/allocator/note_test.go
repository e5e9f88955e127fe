package allocator

import (
	"math"
	"testing"
)

// TestRoundNote: a round's note names the policy and its fitness, and
// the last round's when there is one.
func TestRoundNote(t *testing.T) {
	for _, tc := range []struct {
		prev, fitness float64
		want          string
	}{
		{0, 0.8, "policy pollux, fitness 0.8"},
		{0.8, 0.9, "policy pollux, fitness 0.9 (the last round's 0.8)"},
		{2, 1, "policy pollux, fitness 1 (the last round's 2)"},
		{-2, -1, "policy pollux, fitness -1 (the last round's -2)"},
		{math.NaN(), 1, "policy pollux, fitness 1"},
		{1, math.Inf(1), "policy pollux, fitness +Inf"},
	} {
		if got := roundNote("pollux", tc.prev, tc.fitness); got != tc.want {
			t.Errorf("roundNote(%v, %v) = %q, want %q", tc.prev, tc.fitness, got, tc.want)
		}
	}
}
