package optimizer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bruteChoices enumerates every assignment.
func bruteChoices(items []choiceItem, caps []int) float64 {
	best := math.Inf(1)
	pick := make([]int, len(items))
	var rec func(j int, used []int, cost float64)
	rec = func(j int, used []int, cost float64) {
		if j == len(items) {
			best = math.Min(best, cost)
			return
		}
		it := items[j]
		if it.forced < 0 {
			pick[j] = -1
			rec(j+1, used, cost+it.none)
		}
		for i, o := range it.opts {
			if it.forced >= 0 && i != it.forced {
				continue
			}
			if used[o.typ]+o.size > caps[o.typ] {
				continue
			}
			used[o.typ] += o.size
			pick[j] = i
			rec(j+1, used, cost+o.cost)
			used[o.typ] -= o.size
		}
	}
	rec(0, make([]int, len(caps)), 0)
	return best
}

func randomChoices(rng *rand.Rand, jobs, types int) ([]choiceItem, []int) {
	caps := make([]int, types)
	for t := range caps {
		caps[t] = 2 + rng.IntN(10)
	}
	items := make([]choiceItem, jobs)
	for j := range items {
		it := choiceItem{none: 5 + rng.Float64()*5, forced: -1}
		for t := 0; t < types; t++ {
			for k := 1; k <= caps[t]; k *= 2 {
				it.opts = append(it.opts, option{typ: t, size: k, cost: math.Round(100*rng.Float64()*8) / 100})
			}
		}
		if rng.IntN(6) == 0 {
			it.forced = rng.IntN(len(it.opts))
			if it.opts[it.forced].size > caps[it.opts[it.forced].typ]/2 {
				it.forced = -1
			}
		}
		items[j] = it
	}
	return items, caps
}

// The dynamic program is exact: it matches exhaustive enumeration on random
// small rounds, and its picks fit and add up to its cost.
func TestSolveChoicesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 200; trial++ {
		items, caps := randomChoices(rng, 1+rng.IntN(5), 1+rng.IntN(3))
		want := bruteChoices(items, caps)
		sol := solveChoices(items, caps, defaultExactStates)
		if !sol.exact || math.Abs(sol.cost-want) > 1e-9 {
			t.Fatalf("trial %d: cost %v exact %v, brute force %v", trial, sol.cost, sol.exact, want)
		}
		checkSolution(t, items, caps, sol)
	}
}

// structuredChoices is a round shaped like the policies' ones: every job's
// goodput on a type rises with the GPU count and saturates (Amdahl-like),
// types differ by a speed factor per job, and the cost is the goodput to
// the power -0.5 (none: 1.1, Sia's penalty).
func structuredChoices(rng *rand.Rand, jobs, types int) ([]choiceItem, []int) {
	caps := make([]int, types)
	for t := range caps {
		caps[t] = 4 * (1 + rng.IntN(4))
	}
	items := make([]choiceItem, jobs)
	for j := range items {
		serial := 0.02 + 0.3*rng.Float64()
		it := choiceItem{none: 1.1, forced: -1}
		for t := 0; t < types; t++ {
			speed := 0.5 + 3*rng.Float64()
			for k := 1; k <= caps[t]; k++ {
				g := speed / (serial + (1-serial)/float64(k))
				it.opts = append(it.opts, option{typ: t, size: k, cost: math.Round(100*math.Pow(g, -0.5)) / 100})
			}
		}
		items[j] = it
	}
	return items, caps
}

// The Lagrangian path (forced here by a tiny state budget) returns a
// feasible solution no better than the optimum and a bound no better than
// it either; on rounds shaped like the policies' ones it stays within a
// few percent of the optimum.
func TestSolveChoicesLagrangian(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	worst := 0.0
	for trial := 0; trial < 100; trial++ {
		items, caps := structuredChoices(rng, 2+rng.IntN(4), 1+rng.IntN(2))
		opt := bruteChoices(items, caps)
		sol := solveChoices(items, caps, 1)
		checkSolution(t, items, caps, sol)
		if sol.cost < opt-1e-9 || sol.bound > opt+1e-9 {
			t.Fatalf("trial %d: cost %v bound %v around optimum %v", trial, sol.cost, sol.bound, opt)
		}
		worst = math.Max(worst, (sol.cost-opt)/opt)
	}
	t.Logf("worst relative excess over the optimum: %.3g", worst)
	if worst > 0.05 {
		t.Errorf("the Lagrangian path is %.1f%% above the optimum on some round, want at most 5%%", 100*worst)
	}
}

func checkSolution(t *testing.T, items []choiceItem, caps []int, sol choiceSolution) {
	t.Helper()
	used := make([]int, len(caps))
	cost := 0.0
	for j, p := range sol.pick {
		it := items[j]
		if it.forced >= 0 && p != it.forced {
			t.Fatalf("item %d forced to %d, picked %d", j, it.forced, p)
		}
		if p < 0 {
			cost += it.none
			continue
		}
		used[it.opts[p].typ] += it.opts[p].size
		cost += it.opts[p].cost
	}
	for ty, u := range used {
		if u > caps[ty] {
			t.Fatalf("type %d over capacity: %d > %d", ty, u, caps[ty])
		}
	}
	if math.Abs(cost-sol.cost) > 1e-9 {
		t.Fatalf("reported cost %v, picks cost %v", sol.cost, cost)
	}
}
