package optimizer

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Operator rates of pollux-spec.md section 4.
const (
	resetRate    = 0.1 // a job's row is reset to its current allocation
	zeroJobRate  = 0.1 // a job is picked for zeroing entries
	zeroCellRate = 0.1 // each entry of a picked job is zeroed
)

// problem is one round's search space: the objective plus the constraint
// data the operators and repair need. It is read-only once built, so
// workers share it.
type problem struct {
	obj      *Objective
	jobs     int
	nodes    int
	capacity []int
	order    []int
	minRep   []int
	maxRep   []int
	// The topology, when the cluster has several racks (multiRack): every
	// node's rack, and per job the level of its required and preferred
	// topology (-1: none). With one rack none of it is read.
	multiRack       bool
	tp              *topo
	rack            []int32
	req, pref       []int
	anyReq, anyPref bool
	// preOwned marks nodes a distributed job outside the problem already
	// uses (a rack's share of a job spanning racks): no distributed job
	// of the problem may use them. Nil: none.
	preOwned []bool
}

// initOwner resets owner: -1 (free) on every node, a job index past the
// problem's on pre-owned nodes.
func (pr *problem) initOwner(owner []int) {
	for n := range owner {
		owner[n] = -1
	}
	for n, o := range pr.preOwned {
		if o {
			owner[n] = pr.jobs
		}
	}
}

// spanRate is the probability that a mutation draws a job's new node from
// anywhere in the cluster rather than from its own rack.
const spanRate = 0.1

func newProblem(obj *Objective) *problem {
	snap := obj.snap
	pr := &problem{
		obj:      obj,
		jobs:     len(snap.Jobs),
		nodes:    len(snap.Nodes),
		capacity: obj.capacity,
		order:    obj.order,
		minRep:   make([]int, len(snap.Jobs)),
		maxRep:   make([]int, len(snap.Jobs)),
	}
	for j := range snap.Jobs {
		pr.minRep[j] = snap.Jobs[j].MinReplicas
		pr.maxRep[j] = snap.Jobs[j].MaxReplicas
	}
	if obj.multiRack {
		pr.multiRack, pr.tp, pr.rack = true, obj.topo, obj.topo.domain[0]
		pr.req = make([]int, pr.jobs)
		pr.pref = make([]int, pr.jobs)
		for j := range snap.Jobs {
			c := snap.Jobs[j].Topology
			pr.req[j], pr.pref[j] = pr.tp.level(c.Required), pr.tp.level(c.Preferred)
			pr.anyPref = pr.anyPref || pr.pref[j] >= 0
			if pr.req[j] >= 0 {
				pr.anyReq = true
				// No domain of the level holds more than its largest.
				pr.maxRep[j] = min(pr.maxRep[j], slices.Max(pr.tp.gpus[pr.req[j]]))
			}
		}
	}
	return pr
}

// masked returns a copy of pr in which only the first n nodes have GPUs:
// the search space of allocations over "the first n nodes" of a cluster
// (mutation, repair and the climber never place replicas on a node
// without capacity).
func (pr *problem) masked(n int) *problem {
	q := *pr
	q.capacity = make([]int, len(pr.capacity))
	copy(q.capacity[:min(n, len(q.capacity))], pr.capacity)
	return &q
}

// homeRack is the rack holding most of pl's replicas (the first such in
// node order), -1 for the empty placement.
func (pr *problem) homeRack(pl Placement) int {
	if len(pl) == 0 {
		return -1
	}
	if len(pl) == 1 {
		return int(pr.rack[pl[0].Node])
	}
	best, bestC := -1, 0
	for i, nc := range pl {
		r := pr.rack[nc.Node]
		c := 0
		for _, o := range pl[i:] {
			if pr.rack[o.Node] == r {
				c += o.Count
			}
		}
		if c > bestC && (i == 0 || !rackSeen(pr.rack, pl[:i], r)) {
			best, bestC = int(r), c
		}
	}
	return best
}

func rackSeen(rack []int32, pl Placement, r int32) bool {
	for _, nc := range pl {
		if rack[nc.Node] == r {
			return true
		}
	}
	return false
}

// keepDomain returns pl restricted to the domain of level l holding most
// of its replicas (the first such in node order).
func (pr *problem) keepDomain(pl Placement, l int, out Placement) Placement {
	dom := pr.tp.domain[l]
	best, bestC := int32(-1), 0
	for i, nc := range pl {
		d := dom[nc.Node]
		seen := false
		for _, o := range pl[:i] {
			if dom[o.Node] == d {
				seen = true
				break
			}
		}
		if seen {
			continue
		}
		c := 0
		for _, o := range pl[i:] {
			if dom[o.Node] == d {
				c += o.Count
			}
		}
		if c > bestC {
			best, bestC = d, c
		}
	}
	out = out[:0]
	for _, nc := range pl {
		if dom[nc.Node] == best {
			out = append(out, nc)
		}
	}
	return out
}

// indiv is one allocation of the population. Placement slices are never
// modified in place once stored, so individuals share them freely.
type indiv struct {
	alloc []Placement
	terms []float64
	sum   float64
	fit   float64
}

func (pr *problem) newIndiv() *indiv {
	return &indiv{alloc: make([]Placement, pr.jobs), terms: make([]float64, pr.jobs)}
}

// copyFrom makes ind a copy of src (sharing placement slices).
func (ind *indiv) copyFrom(src *indiv) {
	copy(ind.alloc, src.alloc)
	copy(ind.terms, src.terms)
	ind.sum, ind.fit = src.sum, src.fit
}

// evaluate recomputes every term and the fitness.
func (pr *problem) evaluate(ind *indiv) {
	sum := 0.0
	for j, pl := range ind.alloc {
		t := pr.obj.term(j, pl)
		ind.terms[j] = t
		sum += t
	}
	ind.sum = sum
	ind.fit = pr.obj.fromSum(sum)
}

// reevaluate recomputes the terms of touched jobs only.
func (pr *problem) reevaluate(ind *indiv, touched []bool) {
	sum := 0.0
	for j := range ind.terms {
		if touched[j] {
			ind.terms[j] = pr.obj.term(j, ind.alloc[j])
		}
		sum += ind.terms[j]
	}
	ind.sum = sum
	ind.fit = pr.obj.fromSum(sum)
}

// worker holds one goroutine's scratch space and random source.
type worker struct {
	pr      *problem
	pcg     *rand.PCG
	rng     *rand.Rand
	used    []int
	owner   []int
	free    []int
	touched []bool
	buf     Placement
	perm    []int
	cdf     []float64
	// freeRack lists the free nodes by rack (multi-rack clusters only):
	// rack r's are freeRack[rackStart[r]:rackStart[r+1]].
	freeRack  []int
	rackStart []int
	// arena backs the placements the worker creates: placements are
	// immutable once stored, so they can share one large allocation.
	arena Placement
}

// arenaChunk is how many entries one arena allocation holds.
const arenaChunk = 4096

// clone copies p into the worker's arena.
func (w *worker) clone(p Placement) Placement {
	n := len(p)
	if n == 0 {
		return nil
	}
	if len(w.arena)+n > cap(w.arena) {
		w.arena = make(Placement, 0, max(arenaChunk, n))
	}
	start := len(w.arena)
	w.arena = append(w.arena, p...)
	return w.arena[start : start+n : start+n]
}

// sortByNode sorts a short placement by node (insertion sort).
func sortByNode(p Placement) {
	for i := 1; i < len(p); i++ {
		for k := i; k > 0 && p[k].Node < p[k-1].Node; k-- {
			p[k], p[k-1] = p[k-1], p[k]
		}
	}
}

func (pr *problem) newWorker() *worker {
	pcg := rand.NewPCG(0, 0)
	return &worker{
		pr:      pr,
		pcg:     pcg,
		rng:     rand.New(pcg),
		used:    make([]int, pr.nodes),
		owner:   make([]int, pr.nodes),
		free:    make([]int, 0, pr.nodes),
		touched: make([]bool, pr.jobs),
		buf:     make(Placement, 0, 64),
		perm:    make([]int, 0, 64),
	}
}

// indexFreeByRack fills freeRack and rackStart from w.free (a counting
// sort, so each rack's nodes stay in node order).
func (w *worker) indexFreeByRack() {
	pr := w.pr
	racks := pr.tp.racks()
	if cap(w.rackStart) < racks+1 {
		w.rackStart = make([]int, racks+1)
	}
	w.rackStart = w.rackStart[:racks+1]
	clear(w.rackStart)
	for _, n := range w.free {
		w.rackStart[pr.rack[n]+1]++
	}
	for r := 1; r <= racks; r++ {
		w.rackStart[r] += w.rackStart[r-1]
	}
	if cap(w.freeRack) < len(w.free) {
		w.freeRack = make([]int, len(w.free))
	}
	w.freeRack = w.freeRack[:len(w.free)]
	next := w.perm[:0]
	next = append(next, w.rackStart[:racks]...)
	for _, n := range w.free {
		r := pr.rack[n]
		w.freeRack[next[r]] = n
		next[r]++
	}
	w.perm = next[:0]
}

// drawFree picks a free node for a mutation of a job at home rack home
// (-1: none yet), not among taken: from the home rack with probability
// 1 - spanRate, else anywhere. It returns -1 when the draw hit a taken
// node (the caller draws again).
func (w *worker) drawFree(home int, taken Placement) int {
	if home >= 0 && w.rng.Float64() >= spanRate {
		lo, hi := w.rackStart[home], w.rackStart[home+1]
		for try := 0; try < 4 && hi > lo; try++ {
			n := w.freeRack[lo+w.rng.IntN(hi-lo)]
			if countOn(taken, n) == 0 {
				return n
			}
		}
	}
	n := w.free[w.rng.IntN(len(w.free))]
	if countOn(taken, n) > 0 {
		return -1
	}
	return n
}

// reseed makes the worker's random stream a pure function of (seed, a, b).
func (w *worker) reseed(seed, a, b uint64) {
	w.pcg.Seed(seed^0x9e3779b97f4a7c15*(a+1), b)
}

func (w *worker) clearTouched() {
	clear(w.touched)
}

// set replaces job j's placement (pl must not be modified afterwards).
func (w *worker) set(ind *indiv, j int, pl Placement) {
	ind.alloc[j] = pl
	w.touched[j] = true
}

// mutate applies the three mutations of the spec to ind.
func (w *worker) mutate(ind *indiv) {
	pr, rng := w.pr, w.rng
	// (1) Reset rows to the current allocation.
	for j := range ind.alloc {
		if rng.Float64() < resetRate {
			cur := pr.obj.current[j]
			if !ind.alloc[j].Equal(cur) {
				w.set(ind, j, cur)
			}
		}
	}
	// (2) Zero some entries of some rows.
	for j, pl := range ind.alloc {
		if len(pl) == 0 || rng.Float64() >= zeroJobRate {
			continue
		}
		w.buf = w.buf[:0]
		for _, nc := range pl {
			if rng.Float64() >= zeroCellRate {
				w.buf = append(w.buf, nc)
			}
		}
		if len(w.buf) != len(pl) {
			w.set(ind, j, w.clone(w.buf))
		}
	}
	// (3) Raise entries on nodes with free GPUs, preferring the nodes a
	// job already uses: a free node is picked with probability 1/F, and a
	// free node of the job's own U nodes also with probability 1/U.
	clear(w.used)
	for _, pl := range ind.alloc {
		for _, nc := range pl {
			w.used[nc.Node] += nc.Count
		}
	}
	w.free = w.free[:0]
	for n, c := range pr.capacity {
		if w.used[n] < c {
			w.free = append(w.free, n)
		}
	}
	if len(w.free) == 0 {
		return
	}
	pF := 1 / float64(len(w.free))
	w.pickCDF(len(w.free), pF)
	if pr.multiRack {
		w.indexFreeByRack()
	}
	for j, pl := range ind.alloc {
		u := 0
		for _, nc := range pl {
			if w.used[nc.Node] < pr.capacity[nc.Node] {
				u++
			}
		}
		w.buf = w.buf[:0]
		changed := false
		if u > 0 {
			pU := 1 / float64(u)
			thrFU := threshold(pF + pU - pF*pU)
			for _, nc := range pl {
				c := pr.capacity[nc.Node]
				if w.used[nc.Node] < c && rng.Uint64() < thrFU {
					if v := nc.Count + rng.IntN(c-nc.Count+1); v != nc.Count {
						changed = true
						nc.Count = v
					}
				}
				w.buf = append(w.buf, nc)
			}
		} else {
			w.buf = append(w.buf, pl...)
		}
		// Every other free node with probability pF, independently: draw
		// how many free nodes are hit (binomial), then which ones (distinct,
		// uniformly), and skip the job's own.
		hits := w.picks()
		home := -1
		if pr.multiRack && hits > 0 {
			home = pr.homeRack(pl)
		}
		for h := 0; h < hits; h++ {
			var n int
			if pr.multiRack {
				// Mostly within the job's rack (the first hit's, for a
				// job without GPUs).
				if n = w.drawFree(home, w.buf[len(pl):]); n < 0 {
					h--
					continue
				}
				if home < 0 {
					home = int(pr.rack[n])
				}
			} else {
				n = w.free[rng.IntN(len(w.free))]
				if countOn(w.buf[len(pl):], n) > 0 {
					h-- // already hit: draw again (hits <= free nodes, so this ends)
					continue
				}
			}
			// A hit on the job's own node, or raised to 0, is remembered
			// as a zero entry (dropped below).
			v := 0
			if countOn(pl, n) == 0 {
				v = rng.IntN(pr.capacity[n] + 1)
			}
			w.buf = append(w.buf, NodeCount{Node: n, Count: v})
			changed = changed || v > 0
		}
		if len(w.buf) > len(pl) {
			out := w.buf[:len(pl)]
			for _, nc := range w.buf[len(pl):] {
				if nc.Count > 0 {
					out = append(out, nc)
				}
			}
			w.buf = out
		}
		if changed {
			sortByNode(w.buf)
			w.set(ind, j, w.clone(w.buf))
		}
	}
}

// maxPicks caps the free nodes one job's mutation hits (the binomial tail
// beyond it is below 1e-9).
const maxPicks = 12

// pickCDF tabulates the binomial(f, p) distribution of hits, truncated at
// maxPicks.
func (w *worker) pickCDF(f int, p float64) {
	top := min(f, maxPicks)
	w.cdf = w.cdf[:0]
	if p >= 1 { // every node is hit
		for c := 0; c < top; c++ {
			w.cdf = append(w.cdf, 0)
		}
		w.cdf = append(w.cdf, 1)
		return
	}
	pmf := math.Pow(1-p, float64(f)) // P(0)
	acc := 0.0
	for c := 0; c <= top; c++ {
		acc += pmf
		w.cdf = append(w.cdf, acc)
		pmf *= float64(f-c) / float64(c+1) * p / (1 - p)
	}
}

// picks draws a number of hits from the tabulated distribution.
func (w *worker) picks() int {
	u := w.rng.Float64()
	for c, v := range w.cdf {
		if u < v {
			return c
		}
	}
	return len(w.cdf) - 1
}

// threshold turns a probability into a bound for rng.Uint64() < bound.
func threshold(p float64) uint64 {
	if p >= 1 {
		return math.MaxUint64
	}
	if p <= 0 {
		return 0
	}
	v := p * (1 << 64)
	if v >= 1<<64 {
		return math.MaxUint64
	}
	return uint64(v)
}

// repair enforces, in the spec's order: at most one distributed job per
// node (the first in job order keeps its replicas there); at most
// max_replicas per job and at most MaxJobNodes nodes per job (nodes kept
// in random order); node capacity, filled in job order; min_replicas or
// nothing.
func (w *worker) repair(ind *indiv) {
	pr := w.pr
	pr.initOwner(w.owner)
	clear(w.used)
	for _, j := range pr.order {
		pl := ind.alloc[j]
		if pr.anyReq && pr.req[j] >= 0 && pr.tp.spans(pr.req[j], pl) {
			// A required topology keeps the job in one domain: the one
			// holding most of its replicas.
			w.buf = pr.keepDomain(pl, pr.req[j], w.buf)
			pl = w.clone(w.buf)
			w.set(ind, j, pl)
		}
		if len(pl) > 1 {
			w.buf = w.buf[:0]
			for _, nc := range pl {
				if w.owner[nc.Node] < 0 {
					w.owner[nc.Node] = j
					w.buf = append(w.buf, nc)
				}
			}
			if len(w.buf) != len(pl) {
				pl = w.clone(w.buf)
				w.set(ind, j, pl)
			}
		}
		if pl.Replicas() > pr.maxRep[j] || len(pl) > MaxJobNodes {
			pl = w.trim(pl, pr.maxRep[j])
			w.set(ind, j, pl)
		}
		fits := true
		for _, nc := range pl {
			if nc.Count > pr.capacity[nc.Node]-w.used[nc.Node] {
				fits = false
				break
			}
		}
		if !fits {
			w.buf = w.buf[:0]
			for _, nc := range pl {
				if c := min(nc.Count, pr.capacity[nc.Node]-w.used[nc.Node]); c > 0 {
					w.buf = append(w.buf, NodeCount{Node: nc.Node, Count: c})
				}
			}
			pl = w.clone(w.buf)
			w.set(ind, j, pl)
		}
		for _, nc := range pl {
			w.used[nc.Node] += nc.Count
		}
		if len(pl) > 0 && pl.Replicas() < pr.minRep[j] {
			w.set(ind, j, nil)
		}
	}
}

// trim keeps at most maxRep replicas on at most MaxJobNodes nodes of pl,
// visiting its nodes in random order.
func (w *worker) trim(pl Placement, maxRep int) Placement {
	w.perm = w.perm[:0]
	for i := range pl {
		w.perm = append(w.perm, i)
	}
	w.rng.Shuffle(len(w.perm), func(a, b int) { w.perm[a], w.perm[b] = w.perm[b], w.perm[a] })
	out := w.buf[:0]
	left := maxRep
	for _, i := range w.perm {
		if left <= 0 || len(out) == MaxJobNodes {
			break
		}
		c := min(pl[i].Count, left)
		out = append(out, NodeCount{Node: pl[i].Node, Count: c})
		left -= c
	}
	sortByNode(out)
	w.buf = out
	return w.clone(out)
}
