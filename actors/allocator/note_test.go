package allocator

import (
	"math"
	"testing"
)

// TestRoundNote: a round's note names the policy and compares its
// fitness with the last round's when there is one to compare with.
func TestRoundNote(t *testing.T) {
	for _, tc := range []struct {
		prev, fitness float64
		want          string
	}{
		{0, 0.8, "policy pollux, fitness 0.8"},
		{0.8, 0.9, "policy pollux, fitness 0.9 against 0.8 in the last round (+12.5%)"},
		{2, 1, "policy pollux, fitness 1 against 2 in the last round (-50.0%)"},
		{-2, -1, "policy pollux, fitness -1 against -2 in the last round (+50.0%)"},
		{math.NaN(), 1, "policy pollux, fitness 1"},
		{1, math.Inf(1), "policy pollux, fitness +Inf"},
	} {
		if got := roundNote("pollux", tc.prev, tc.fitness); got != tc.want {
			t.Errorf("roundNote(%v, %v) = %q, want %q", tc.prev, tc.fitness, got, tc.want)
		}
	}
}
