package allocator_test

import (
	"testing"
	"time"

	"pollux/actors/allocator"
	"pollux/internal/poll"
	"pollux/optimizer"
)

// TestRoundInfoCarriesThePolicyInput checks that an observer gets each
// round's input: the policy that decided it, run again on the round's
// snapshot and previous state at the round's search effort, reaches the
// round's fitness exactly (the search is seeded and deterministic), both
// for the first round of a leadership (a search at the least effort) and
// for a later search.
func TestRoundInfoCarriesThePolicyInput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster")
	}
	c := newTCluster(t, clusterOpts{servers: 3, nodes: 2, gpus: 4, timeScale: 800})
	for _, id := range []string{"a", "b", "c"} {
		c.submit(id, "cifar10", 8)
	}
	// find returns a copy of the first committed round with jobs that
	// ok accepts (c.rounds may grow meanwhile).
	find := func(ok func(r *allocator.RoundInfo) bool) *allocator.RoundInfo {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range c.rounds {
			if r := c.rounds[i]; r.Committed && r.Snapshot != nil && len(r.Snapshot.Jobs) > 0 && ok(&r) {
				return &r
			}
		}
		return nil
	}
	var search, first *allocator.RoundInfo
	poll.Until(t, 60*time.Second, "a search with jobs", func() bool {
		search = find(func(r *allocator.RoundInfo) bool { return r.Policy == "pollux" && r.Prev != nil })
		return search != nil
	})
	// A new leader's first round, with the jobs placed.
	killed := time.Now()
	c.kill(c.leader())
	poll.Until(t, 60*time.Second, "the first round of a new leader", func() bool {
		first = find(func(r *allocator.RoundInfo) bool { return r.FirstOfTerm && r.Elected.After(killed) })
		return first != nil
	})
	if first.Policy != "pollux" || first.SearchEffort != 1.0/64 {
		t.Errorf("first round: policy %q, search effort %v; want pollux's search at the least effort, 1/64", first.Policy, first.SearchEffort)
	}
	if !(search.SearchEffort > 0 && search.SearchEffort <= 1) {
		t.Errorf("search round: effort %v, want in (0, 1]", search.SearchEffort)
	}
	for _, tc := range []struct {
		name   string
		r      *allocator.RoundInfo
		policy optimizer.Policy
	}{
		{"first round", first, &optimizer.Pollux{PowerMean: optimizer.DefaultPowerMean, Effort: 1.0 / 64, MeasuredRestart: true}},
		{"search", search, &optimizer.Pollux{PowerMean: optimizer.DefaultPowerMean, Effort: search.SearchEffort, MeasuredRestart: true}},
	} {
		res, err := tc.policy.Allocate(tc.r.Snapshot, tc.r.Prev)
		if err != nil {
			t.Fatal(err)
		}
		if res.Diagnostics.Fitness != tc.r.Fitness || !(tc.r.Fitness > 0) {
			t.Errorf("%s: fitness %v again, %v in the round", tc.name, res.Diagnostics.Fitness, tc.r.Fitness)
		}
	}
}
