package optimizer_test

import (
	"sort"
	"testing"
	"time"

	"pollux/optimizer"
	"pollux/optimizer/refsnap"
	"pollux/testbed/artifact"
)

func loadArtifact(t testing.TB) []refsnap.Entry {
	t.Helper()
	dir := artifact.Need(t, "pollux-artifact", "allocator-snapshots")
	entries, err := refsnap.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestPolluxBeatsReferenceOnArtifact checks that, over 5 seeds, our
// search's median fitness reaches the reference NSGA-II's median on every
// artifact snapshot.
func TestPolluxBeatsReferenceOnArtifact(t *testing.T) {
	for _, e := range loadArtifact(t) {
		var fits []float64
		var spent time.Duration
		for seed := range uint64(5) {
			snap := *e.Snapshot
			snap.Seed = seed
			start := time.Now()
			res, err := optimizer.NewPollux().Allocate(&snap, nil)
			spent += time.Since(start)
			if err != nil {
				t.Fatalf("%s: %v", e.Name, err)
			}
			fits = append(fits, res.Diagnostics.Fitness)
		}
		sort.Float64s(fits)
		med := fits[len(fits)/2]
		t.Logf("%s: jobs %d, current %.6f, reference median %.6f, ours median %.6f (min %.6f), %v/round",
			e.Name, len(e.Snapshot.Jobs), e.Reference.CurrentFitness, e.Reference.GAFitnessMed, med, fits[0], spent/5)
		if med < e.Reference.GAFitnessMed*(1-1e-9) { // equal optima differ in the last bits
			t.Errorf("%s: median fitness %.9f below the reference's %.9f", e.Name, med, e.Reference.GAFitnessMed)
		}
	}
}
