package optimizer

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Hierarchy selects how Pollux searches a cluster of several racks.
type Hierarchy int

const (
	// HierarchyAuto searches rack by rack when the cluster has at least
	// hierMinRacks racks and the round at least hierMinJobs jobs, the
	// whole cluster at once otherwise.
	HierarchyAuto Hierarchy = iota
	// HierarchyFlat always searches the whole cluster at once.
	HierarchyFlat
	// HierarchyRacks searches rack by rack whenever there are several
	// racks.
	HierarchyRacks
)

// Thresholds of HierarchyAuto.
const (
	hierMinRacks = 8
	hierMinJobs  = 128
)

// Per-rack search budget of the hierarchical search (each rack's problem
// is small: its share of the jobs on a few nodes).
const (
	hierPopulation  = 16
	hierGenerations = 12
)

// Hierarchical reports whether a round on snap would be searched rack by
// rack (false for a snapshot the policy would refuse).
func (p *Pollux) Hierarchical(snap *Snapshot) bool {
	tp, err := check(snap)
	if err != nil {
		return false
	}
	switch {
	case tp.racks() < 2 || p.Hierarchy == HierarchyFlat:
		return false
	case p.Hierarchy == HierarchyRacks:
		return true
	}
	return tp.racks() >= hierMinRacks && len(snap.Jobs) >= hierMinJobs
}

// hierarchical reports whether the round searches rack by rack.
func (p *Pollux) hierarchical(pr *problem) bool {
	if !pr.multiRack {
		return false
	}
	switch p.Hierarchy {
	case HierarchyFlat:
		return false
	case HierarchyRacks:
		return true
	}
	return pr.tp.racks() >= hierMinRacks && pr.jobs >= hierMinJobs
}

// allocateHier is the search rack by rack: the objective is a sum of
// per-job terms, so jobs kept within different racks interact only through
// the GPUs they take, and a round splits into one small genetic search per
// rack, merged and hill-climbed over the whole cluster (docs/policies.md,
// "The search rack by rack"). It returns the best individual, the
// population for the next round, the evaluations and the per-rack
// generations.
func (p *Pollux) allocateHier(pr *problem, prev *State, seed uint64) (*indiv, [][]Placement, int, int) {
	obj, tp := pr.obj, pr.tp
	w := pr.newWorker()
	w.reseed(seed, 0, 0)
	base := pr.newIndiv()
	copy(base.alloc, obj.current)
	w.clearTouched()
	w.repair(base)
	pr.evaluate(base)
	evals := 1
	var prevBest []Placement
	if ad := pr.adopt(prev, 1); len(ad) > 0 {
		prevBest = ad[0]
	}

	// Step 1: groups of racks and their jobs.
	group, groupNodes := p.rackGroups(pr, base)
	groups := len(groupNodes)
	gpus := make([]int, groups)
	for n, c := range pr.capacity {
		gpus[group[pr.rack[n]]] += c
	}
	home := make([]int, pr.jobs)
	count := make([]int, groups)
	for j, pl := range base.alloc {
		home[j] = -1
		if len(pl) > 0 {
			home[j] = group[pr.homeRack(pl)]
			count[home[j]]++
		}
	}
	for _, j := range pr.order {
		if home[j] >= 0 {
			continue
		}
		if j < len(prevBest) && len(prevBest[j]) > 0 && !tp.spans(0, prevBest[j]) {
			home[j] = group[pr.rack[prevBest[j][0].Node]]
		} else {
			best, bestV := 0, math.Inf(-1)
			for g := range gpus {
				if v := float64(gpus[g]) / float64(count[g]+1); v > bestV {
					best, bestV = g, v
				}
			}
			home[j] = best
		}
		count[home[j]]++
	}
	members := make([][]int, groups)
	for j, g := range home {
		members[g] = append(members[g], j)
	}

	// Step 2: search every group.
	type groupResult struct {
		alloc []Placement
		evals int
	}
	out := make([]groupResult, groups)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range p.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				g := int(next.Add(1)) - 1
				if g >= groups {
					return
				}
				if len(members[g]) == 0 {
					continue
				}
				nodes := groupNodes[g]
				caps := make([]int, len(nodes))
				local := make(map[int]int, len(nodes))
				for i, n := range nodes {
					caps[i] = pr.capacity[n]
					local[n] = i
				}
				sub := newProblem(obj.restrict(members[g], nodes, caps))
				var seeds [][]Placement
				if prevBest != nil {
					alloc := make([]Placement, len(members[g]))
					for i, j := range members[g] {
						alloc[i] = mapPlacement(prevBest[j], local)
					}
					seeds = append(seeds, alloc)
				}
				best, _, ev, _ := evolve(sub, seeds, true, hierPopulation, hierGenerations, 1, seed^(uint64(g+1)*0xd1b54a32d192ed03))
				out[g] = groupResult{alloc: best.alloc, evals: ev}
			}
		}()
	}
	wg.Wait()

	// Step 3: merge, repair and climb over the whole cluster.
	ind := pr.newIndiv()
	ind.copyFrom(base)
	for g, res := range out {
		nodes := groupNodes[g]
		for i, j := range members[g] {
			var pl Placement
			for _, nc := range res.alloc[i] {
				pl = append(pl, NodeCount{Node: nodes[nc.Node], Count: nc.Count})
			}
			ind.alloc[j] = pl
		}
		evals += res.evals
	}
	w.clearTouched()
	w.repair(ind)
	pr.evaluate(ind)
	cl := pr.newClimber()
	cl.improve(ind)
	evals++
	if pr.anyPref {
		cl.prefer(ind)
	}
	if base.fit > ind.fit {
		// Cannot happen with a sound search (the racks start from the
		// current allocation), but never return less than it.
		ind = base
	}
	return ind, [][]Placement{ind.alloc, base.alloc}, evals, hierGenerations
}

// mapPlacement maps pl onto the local indexes of local's nodes, or nil
// when it uses a node outside them.
func mapPlacement(pl Placement, local map[int]int) Placement {
	out := make(Placement, 0, len(pl))
	for _, nc := range pl {
		l, ok := local[nc.Node]
		if !ok {
			return nil
		}
		out = append(out, NodeCount{Node: l, Count: nc.Count})
	}
	return out
}

// hierGroupRacks is the most racks one group of the hierarchical search
// holds.
const hierGroupRacks = 4

// rackGroups groups the racks for the hierarchical search: racks that a
// job of base spans are searched together (jobs in repair order, as long
// as a group stays within hierGroupRacks racks; a job whose racks cannot
// be joined is searched within the group of the rack holding most of its
// replicas, and loses the others). It returns every rack's group and
// every group's nodes, ascending.
func (p *Pollux) rackGroups(pr *problem, base *indiv) ([]int, [][]int) {
	tp := pr.tp
	racks := tp.racks()
	parent := make([]int, racks)
	size := make([]int, racks)
	for r := range parent {
		parent[r], size[r] = r, 1
	}
	find := func(r int) int {
		for parent[r] != r {
			parent[r] = parent[parent[r]]
			r = parent[r]
		}
		return r
	}
	var roots []int
	for _, j := range pr.order {
		pl := base.alloc[j]
		if !tp.spans(0, pl) {
			continue
		}
		roots = roots[:0]
		total := 0
		for _, nc := range pl {
			if r := find(int(pr.rack[nc.Node])); !slices.Contains(roots, r) {
				roots = append(roots, r)
				total += size[r]
			}
		}
		if total > hierGroupRacks {
			continue
		}
		for _, r := range roots[1:] {
			parent[r] = roots[0]
		}
		size[roots[0]] = total
	}
	group := make([]int, racks)
	index := map[int]int{}
	var nodes [][]int
	for r := range group {
		root := find(r)
		g, ok := index[root]
		if !ok {
			g = len(nodes)
			index[root] = g
			nodes = append(nodes, nil)
		}
		group[r] = g
	}
	for n := range pr.capacity {
		g := group[pr.rack[n]]
		nodes[g] = append(nodes[g], n)
	}
	return group, nodes
}
