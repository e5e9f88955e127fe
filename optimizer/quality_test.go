package optimizer_test

import (
	"os"
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
