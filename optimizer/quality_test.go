package optimizer_test

import (
	"os"
	"slices"
	"testing"

	"pollux/optimizer"
)

// TestSearchQuality checks, on generated rounds, that the Pollux search
// reaches at least the fitness of the reference-shaped GA (population 100
// x 100 generations over dense matrices) and of the greedy baseline. The
// reference GA costs O(jobs x nodes) per individual: the 256-GPU round is
// skipped under the race detector, and the 2048-GPU one (minutes of
// reference GA) runs only with POLLUX_LONG_TESTS=1; `pollux bench
// allocator --compare` reports the same comparison.
func TestSearchQuality(t *testing.T) {
	for _, tt := range []struct {
		gpus, perNode int
		seed          uint64
	}{
		{64, 4, 1}, {64, 4, 2}, {64, 8, 3}, {256, 4, 1}, {2048, 4, 1},
	} {
		if tt.gpus >= 256 && raceEnabled {
			t.Logf("%d GPUs: skipped under the race detector (reference GA too slow)", tt.gpus)
			continue
		}
		if tt.gpus >= 2048 && os.Getenv("POLLUX_LONG_TESTS") != "1" {
			t.Logf("%d GPUs: skipped (set POLLUX_LONG_TESTS=1 to run)", tt.gpus)
			continue
		}
		snap, err := optimizer.Synthetic(tt.gpus, tt.perNode, tt.gpus/2, tt.seed)
		if err != nil {
			t.Fatal(err)
		}
		fit := map[string]float64{}
		for _, p := range []optimizer.Policy{optimizer.NewPollux(), optimizer.NewRefGA(), optimizer.NewGreedy()} {
			res, err := p.Allocate(snap, nil)
			if err != nil {
				t.Fatalf("%s: %v", p.Name(), err)
			}
			fit[p.Name()] = res.Diagnostics.Fitness
		}
		t.Logf("%d GPUs (seed %d): pollux %.5f, reference GA %.5f, greedy %.5f", tt.gpus, tt.seed, fit["pollux"], fit["reference-ga"], fit["greedy"])
		if fit["pollux"] < fit["reference-ga"] || fit["pollux"] < fit["greedy"] {
			t.Errorf("%d GPUs: pollux below a baseline: %v", tt.gpus, fit)
		}
	}
}

// TestLeastSearchNotBelowTheClimb: a search at the least effort (a new
// leader's first round) is never worse than the greedy climb of the
// current allocation, which is among its seeds, on rounds whose current
// allocation is empty, the search's own, or a perturbed copy of it.
func TestLeastSearchNotBelowTheClimb(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		snap, err := optimizer.Synthetic(256, 4, 128, seed)
		if err != nil {
			t.Fatal(err)
		}
		full, err := optimizer.NewPollux().Allocate(snap, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, current := range []string{"empty", "searched", "perturbed"} {
			s := *snap
			s.Jobs = slices.Clone(snap.Jobs)
			for j := range s.Jobs {
				switch {
				case current == "empty":
					s.Jobs[j].Current = nil
				case current == "searched" || j%3 != 0:
					s.Jobs[j].Current = full.Placements[j]
				default: // every third job loses its GPUs
					s.Jobs[j].Current = nil
				}
			}
			least := optimizer.NewPollux()
			least.SetEffort(1.0 / 64)
			l, err := least.Allocate(&s, nil)
			if err != nil {
				t.Fatal(err)
			}
			g, err := optimizer.NewGreedy().Allocate(&s, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("seed %d, current %s: least search %.5f, climb %.5f", seed, current, l.Diagnostics.Fitness, g.Diagnostics.Fitness)
			if l.Diagnostics.Fitness < g.Diagnostics.Fitness {
				t.Errorf("seed %d, current %s: least search %.6f below the climb %.6f", seed, current, l.Diagnostics.Fitness, g.Diagnostics.Fitness)
			}
		}
	}
}
