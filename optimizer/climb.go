package optimizer

import (
	"slices"
)

// maxClimbPasses bounds the hill climber's sweeps over the jobs.
const maxClimbPasses = 8

// climbGrowth is how many replicas beyond its current count the climber
// tries for a job in one move (speedups need not be concave in K).
const climbGrowth = 8

// climber is a first-improvement hill climber over one individual: for
// each job it tries the best of a few whole-row moves (back to the current
// allocation, grow compactly by 1..climbGrowth replicas, consolidate onto
// one node, and for a job without GPUs, take one from another job) and
// applies it when it improves the objective. Every move keeps the
// individual feasible.
type climber struct {
	pr    *problem
	ind   *indiv
	used  []int
	owner []int // the distributed job on a node, or -1
	// byFree lists the nodes with free GPUs, most free first, as of the
	// start of the pass (entries may be stale; they are re-checked).
	byFree []int
	// onNode lists, per node, the jobs with replicas there as of the start
	// of the pass (entries may be stale; they are re-checked).
	onNode [][]int
	buf    Placement
	// byFreeRack is byFree split by rack, each list most free first
	// (multi-rack clusters only).
	byFreeRack [][]int
	// homes is scratch for the racks a placement uses.
	homes []int32
}

func (pr *problem) newClimber() *climber {
	return &climber{
		pr:     pr,
		used:   make([]int, pr.nodes),
		owner:  make([]int, pr.nodes),
		byFree: make([]int, 0, pr.nodes),
		onNode: make([][]int, pr.nodes),
	}
}

// improve climbs from ind (which must be feasible and evaluated) and
// reports whether it improved it.
func (c *climber) improve(ind *indiv) bool {
	pr := c.pr
	c.load(ind)
	improved := false
	for pass := 0; pass < maxClimbPasses; pass++ {
		c.refresh()
		any := false
		for _, j := range pr.order {
			if c.step(j) {
				any = true
			}
		}
		if !any {
			break
		}
		improved = true
	}
	ind.fit = pr.obj.fromSum(ind.sum)
	return improved
}

// load makes ind the climber's individual and counts its use of nodes.
func (c *climber) load(ind *indiv) {
	c.ind = ind
	clear(c.used)
	c.pr.initOwner(c.owner)
	for j, pl := range ind.alloc {
		for _, nc := range pl {
			c.used[nc.Node] += nc.Count
			if len(pl) > 1 {
				c.owner[nc.Node] = j
			}
		}
	}
}

// prefer keeps every job of ind with a preferred topology level whose
// placement changed this round and spans domains of the level within one
// domain when one holds its replicas (its GPU count unchanged), whatever
// the objective says: the user's preference. It returns whether it moved
// any job.
func (c *climber) prefer(ind *indiv) bool {
	pr := c.pr
	c.load(ind)
	c.refresh()
	moved := false
	for _, j := range pr.order {
		l := pr.pref[j]
		pl := ind.alloc[j]
		if l < 0 || !pr.tp.spans(l, pl) || pl.Equal(pr.obj.current[j]) {
			continue
		}
		if npl := c.inOneDomain(j, pl.Replicas(), l); npl != nil {
			c.apply(j, npl, pr.obj.term(j, npl))
			moved = true
		}
	}
	ind.fit = pr.obj.fromSum(ind.sum)
	return moved
}

// refresh rebuilds the lists of nodes with free GPUs and of the jobs on
// every node.
func (c *climber) refresh() {
	pr := c.pr
	c.byFree = c.byFree[:0]
	for n := range pr.capacity {
		if pr.capacity[n] > c.used[n] {
			c.byFree = append(c.byFree, n)
		}
	}
	slices.SortStableFunc(c.byFree, func(a, b int) int {
		return (pr.capacity[b] - c.used[b]) - (pr.capacity[a] - c.used[a])
	})
	if pr.multiRack {
		if c.byFreeRack == nil {
			c.byFreeRack = make([][]int, pr.tp.racks())
		}
		for r := range c.byFreeRack {
			c.byFreeRack[r] = c.byFreeRack[r][:0]
		}
		for _, n := range c.byFree {
			r := pr.rack[n]
			c.byFreeRack[r] = append(c.byFreeRack[r], n)
		}
	}
	for n := range c.onNode {
		c.onNode[n] = c.onNode[n][:0]
	}
	for j, pl := range c.ind.alloc {
		for _, nc := range pl {
			c.onNode[nc.Node] = append(c.onNode[nc.Node], j)
		}
	}
}

// better reports whether changing the term sum by delta improves fitness.
func (c *climber) better(delta float64) bool {
	const tol = 1e-12
	if c.pr.obj.p < 0 {
		return delta < -tol*c.ind.sum
	}
	return delta > tol*c.ind.sum
}

// free is the GPUs of node n left to job j (its own replicas there count
// as free).
func (c *climber) free(j, n int) int {
	f := c.pr.capacity[n] - c.used[n]
	for _, nc := range c.ind.alloc[j] {
		if nc.Node == n {
			f += nc.Count
		}
	}
	return f
}

// feasible reports whether job j may take placement pl.
func (c *climber) feasible(j int, pl Placement) bool {
	pr := c.pr
	k := pl.Replicas()
	if len(pl) > MaxJobNodes || k > pr.maxRep[j] || (k > 0 && k < pr.minRep[j]) {
		return false
	}
	for _, nc := range pl {
		if nc.Count > c.free(j, nc.Node) {
			return false
		}
		if len(pl) > 1 && c.owner[nc.Node] >= 0 && c.owner[nc.Node] != j {
			return false
		}
	}
	if pr.anyReq && pr.req[j] >= 0 && pr.tp.spans(pr.req[j], pl) {
		return false
	}
	return true
}

// apply gives job j placement pl (feasible) with term t.
func (c *climber) apply(j int, pl Placement, t float64) {
	old := c.ind.alloc[j]
	for _, nc := range old {
		c.used[nc.Node] -= nc.Count
		if len(old) > 1 {
			c.owner[nc.Node] = -1
		}
	}
	for _, nc := range pl {
		c.used[nc.Node] += nc.Count
		if len(pl) > 1 {
			c.owner[nc.Node] = j
		}
	}
	c.ind.alloc[j] = pl
	c.ind.sum += t - c.ind.terms[j]
	c.ind.terms[j] = t
}

// step tries job j's moves and applies the best improving one.
func (c *climber) step(j int) bool {
	pr := c.pr
	cur := c.ind.alloc[j]
	bestDelta := 0.0
	var best Placement
	bestT := 0.0
	try := func(pl Placement) {
		t := pr.obj.term(j, pl)
		if d := t - c.ind.terms[j]; c.better(d) && (best == nil || c.better(d-bestDelta)) {
			bestDelta, best, bestT = d, pl, t
		}
	}
	if rev := pr.obj.current[j]; !cur.Equal(rev) && len(rev) > 0 && c.feasible(j, rev) {
		try(rev)
	}
	k := cur.Replicas()
	for target := max(k+1, pr.minRep[j]); target <= min(max(k, pr.minRep[j])+climbGrowth, pr.maxRep[j]); target++ {
		pl := c.grow(j, target)
		if pl == nil {
			break
		}
		try(pl)
	}
	if len(cur) > 1 {
		if pl := c.consolidate(j, k); pl != nil {
			try(pl)
		}
		if pr.multiRack && pr.tp.spans(0, cur) {
			if pl := c.inOneDomain(j, k, 0); pl != nil {
				try(pl)
			}
		}
	}
	if k > 1 && k-1 >= pr.minRep[j] {
		try(c.shrink(cur))
	}
	if best != nil {
		c.apply(j, best, bestT)
		return true
	}
	if k < pr.maxRep[j] && k+1 >= pr.minRep[j] {
		if c.steal(j) {
			return true
		}
		if pr.jobs*pr.nodes <= takeNodeWork {
			return c.takeNode(j)
		}
	}
	return false
}

// takeNodeWork bounds jobs x nodes for the take-node move, which costs
// O(nodes) per job.
const takeNodeWork = 1 << 16

// takeNode moves job j onto one more node, taken whole from the
// distributed job there (which loses its replicas on it), if the exchange
// improves the objective.
func (c *climber) takeNode(j int) bool {
	pr := c.pr
	cur := c.ind.alloc[j]
	if len(cur) >= MaxJobNodes {
		return false
	}
	for _, nc := range cur {
		if o := c.owner[nc.Node]; o >= 0 && o != j {
			return false
		}
	}
	k := cur.Replicas()
	bestDelta := 0.0
	bestD := -1
	var bestDPl, bestJPl Placement
	bestDT, bestJT := 0.0, 0.0
	for n, d := range c.owner {
		if d < 0 || d == j || d >= pr.jobs {
			continue
		}
		dcur := c.ind.alloc[d]
		i := slices.IndexFunc(dcur, func(nc NodeCount) bool { return nc.Node == n })
		if i < 0 {
			continue
		}
		add := min(pr.maxRep[j]-k, pr.capacity[n]-c.used[n]+dcur[i].Count)
		if add <= 0 {
			continue
		}
		if pr.anyReq && pr.req[j] >= 0 && len(cur) > 0 && pr.tp.domain[pr.req[j]][n] != pr.tp.domain[pr.req[j]][cur[0].Node] {
			continue
		}
		dpl := make(Placement, 0, len(dcur)-1)
		dpl = append(append(dpl, dcur[:i]...), dcur[i+1:]...)
		if dpl.Replicas() < pr.minRep[d] {
			dpl = nil
		}
		jpl := make(Placement, 0, len(cur)+1)
		jpl = append(append(jpl, cur...), NodeCount{Node: n, Count: add})
		sortByNode(jpl)
		dt, jt := pr.obj.term(d, dpl), pr.obj.term(j, jpl)
		delta := dt - c.ind.terms[d] + jt - c.ind.terms[j]
		if c.better(delta) && (bestD < 0 || c.better(delta-bestDelta)) {
			bestDelta, bestD, bestDPl, bestJPl, bestDT, bestJT = delta, d, dpl, jpl, dt, jt
		}
	}
	if bestD < 0 {
		return false
	}
	c.apply(bestD, bestDPl, bestDT)
	c.apply(j, bestJPl, bestJT)
	return true
}

// shrink returns pl with one replica fewer, taken from its smallest count.
func (c *climber) shrink(pl Placement) Placement {
	bi := 0
	for i, nc := range pl {
		if nc.Count < pl[bi].Count {
			bi = i
		}
	}
	return without(pl, bi)
}

// without returns pl with one replica fewer on its i-th node.
func without(pl Placement, i int) Placement {
	out := make(Placement, 0, len(pl))
	out = append(out, pl[:i]...)
	if pl[i].Count > 1 {
		out = append(out, NodeCount{Node: pl[i].Node, Count: pl[i].Count - 1})
	}
	return append(out, pl[i+1:]...)
}

// grow returns job j placed on target replicas: its current replicas
// kept, more added on its own nodes (most free first), then on new nodes
// (most free first, only nodes without another distributed job when the
// job ends up on several nodes). Nil if it does not fit.
func (c *climber) grow(j, target int) Placement {
	pr := c.pr
	cur := c.ind.alloc[j]
	c.buf = append(c.buf[:0], cur...)
	need := target - cur.Replicas()
	// Own nodes first.
	for need > 0 {
		bi, bf := -1, 0
		for i, nc := range c.buf {
			if f := pr.capacity[nc.Node] - c.used[nc.Node] - (nc.Count - countOn(cur, nc.Node)); f > bf {
				bi, bf = i, f
			}
		}
		if bi < 0 {
			break
		}
		add := min(bf, need)
		c.buf[bi].Count += add
		need -= add
	}
	if need > 0 {
		// New nodes make the job distributed: its own nodes must then be
		// free of other distributed jobs.
		if len(cur) > 0 {
			for _, nc := range cur {
				if o := c.owner[nc.Node]; o >= 0 && o != j {
					return nil
				}
			}
		}
		if pr.multiRack {
			need = c.growRacks(j, need)
		}
		for _, n := range c.byFree {
			if need == 0 || len(c.buf) >= MaxJobNodes {
				break
			}
			f := pr.capacity[n] - c.used[n]
			if f <= 0 {
				continue
			}
			if countOn(c.buf, n) > 0 || (c.owner[n] >= 0 && c.owner[n] != j) {
				continue
			}
			add := min(f, need)
			c.buf = append(c.buf, NodeCount{Node: n, Count: add})
			need -= add
		}
	}
	if need > 0 {
		return nil
	}
	pl := slices.Clone(c.buf)
	slices.SortFunc(pl, func(a, b NodeCount) int { return a.Node - b.Node })
	if (len(pl) > 1 || pr.anyReq) && !c.feasible(j, pl) {
		return nil
	}
	return pl
}

// growRacks is grow's first pass on a cluster of several racks: new nodes
// from the racks job j already uses (for a job without GPUs, the rack of
// the node with the most free GPUs), most free first. It appends to c.buf
// and returns the replicas still needed; grow's second pass then takes
// nodes anywhere (within the job's domain, for a required topology).
func (c *climber) growRacks(j, need int) int {
	pr := c.pr
	c.homes = c.homes[:0]
	for _, nc := range c.buf {
		if r := pr.rack[nc.Node]; !slices.Contains(c.homes, r) {
			c.homes = append(c.homes, r)
		}
	}
	if len(c.homes) == 0 {
		if len(c.byFree) == 0 {
			return need
		}
		c.homes = append(c.homes, pr.rack[c.byFree[0]])
	}
	for _, r := range c.homes {
		for _, n := range c.byFreeRack[r] {
			if need == 0 || len(c.buf) >= MaxJobNodes {
				return need
			}
			f := pr.capacity[n] - c.used[n]
			if f <= 0 || countOn(c.buf, n) > 0 || (c.owner[n] >= 0 && c.owner[n] != j) {
				continue
			}
			add := min(f, need)
			c.buf = append(c.buf, NodeCount{Node: n, Count: add})
			need -= add
		}
	}
	return need
}

// inOneDomain returns job j's k replicas within one domain of level l:
// the domain that holds them with the fewest new nodes, trying the
// job's own domains (most of its replicas first) and then, by most free
// GPUs, the nodes' domains; its replicas on the domain's nodes stay,
// more go to the domain's nodes with the most free GPUs. Nil if no
// domain fits them.
func (c *climber) inOneDomain(j, k, l int) Placement {
	pr := c.pr
	cur := c.ind.alloc[j]
	dom := pr.tp.domain[l]
	tryDomain := func(d int32) Placement {
		out := make(Placement, 0, len(cur)+2)
		need := k
		for _, nc := range cur {
			if dom[nc.Node] == d {
				add := min(nc.Count, need)
				out = append(out, NodeCount{Node: nc.Node, Count: add})
				need -= add
			}
		}
		// Top up the kept nodes, then take new ones, most free first.
		for i := range out {
			if need == 0 {
				break
			}
			add := min(need, c.free(j, out[i].Node)-out[i].Count)
			if add > 0 {
				out[i].Count += add
				need -= add
			}
		}
		for _, n := range c.byFree {
			if need == 0 || len(out) >= MaxJobNodes {
				break
			}
			if dom[n] != d || countOn(out, n) > 0 {
				continue
			}
			f := c.free(j, n)
			if f <= 0 {
				continue
			}
			add := min(f, need)
			out = append(out, NodeCount{Node: n, Count: add})
			need -= add
		}
		if need > 0 {
			return nil
		}
		for i := 0; i < len(out); i++ {
			if out[i].Count == 0 {
				out = append(out[:i], out[i+1:]...)
				i--
			}
		}
		sortByNode(out)
		if !c.feasible(j, out) {
			return nil
		}
		return out
	}
	var tried []int32
	for len(tried) < len(cur) {
		best, bestC := int32(-1), 0
		for _, nc := range cur {
			d := dom[nc.Node]
			if slices.Contains(tried, d) {
				continue
			}
			cnt := 0
			for _, o := range cur {
				if dom[o.Node] == d {
					cnt += o.Count
				}
			}
			if cnt > bestC {
				best, bestC = d, cnt
			}
		}
		if best < 0 {
			break
		}
		tried = append(tried, best)
		if pl := tryDomain(best); pl != nil {
			return pl
		}
	}
	for _, n := range c.byFree {
		d := dom[n]
		if slices.Contains(tried, d) {
			continue
		}
		tried = append(tried, d)
		if pl := tryDomain(d); pl != nil {
			return pl
		}
		if len(tried) > len(cur)+4 {
			break
		}
	}
	return nil
}

// consolidate returns job j's k replicas on the single node that fits them
// most tightly (one of its own nodes or a node with free GPUs), or nil.
func (c *climber) consolidate(j, k int) Placement {
	bn, bf := -1, 0
	consider := func(n int) {
		if f := c.free(j, n); f >= k && (bn < 0 || f < bf || f == bf && n < bn) {
			bn, bf = n, f
		}
	}
	for _, nc := range c.ind.alloc[j] {
		consider(nc.Node)
	}
	for _, n := range c.byFree {
		consider(n)
	}
	if bn < 0 {
		return nil
	}
	return Placement{{Node: bn, Count: k}}
}

// steal gives job j one more GPU taken from another job on the same node
// (one of j's nodes, or any node when j has no GPUs), choosing the donor
// whose loss costs least, if the exchange improves the objective.
func (c *climber) steal(j int) bool {
	pr := c.pr
	cur := c.ind.alloc[j]
	bestDelta := 0.0
	bestD := -1
	var bestDPl, bestJPl Placement
	bestDT, bestJT := 0.0, 0.0
	consider := func(n int) {
		jpl := c.plus(cur, n)
		if len(jpl) > 1 {
			// j stays on the same nodes, so the distributed rule holds.
			if len(jpl) != len(cur) {
				return
			}
		}
		jt := pr.obj.term(j, jpl)
		for _, d := range c.onNode[n] {
			dcur := c.ind.alloc[d]
			if d == j || len(dcur) > 1 && len(jpl) > 1 {
				continue
			}
			i := slices.IndexFunc(dcur, func(nc NodeCount) bool { return nc.Node == n })
			if i < 0 {
				continue
			}
			dpl := without(dcur, i)
			if len(dpl) > 0 && dpl.Replicas() < pr.minRep[d] {
				dpl = nil
			}
			dt := pr.obj.term(d, dpl)
			delta := dt - c.ind.terms[d] + jt - c.ind.terms[j]
			if c.better(delta) && (bestD < 0 || c.better(delta-bestDelta)) {
				bestDelta, bestD, bestDPl, bestJPl, bestDT, bestJT = delta, d, dpl, jpl, dt, jt
			}
		}
	}
	if len(cur) == 0 {
		// At most stealNodes full nodes, a window that moves with j.
		N := len(c.onNode)
		start := (j * 7919) % N
		for i, seen := 0, 0; i < N && seen < stealNodes; i++ {
			n := (start + i) % N
			if c.used[n] >= pr.capacity[n] && pr.capacity[n] > 0 {
				consider(n)
				seen++
			}
		}
	} else {
		for _, nc := range cur {
			if c.used[nc.Node] >= pr.capacity[nc.Node] {
				consider(nc.Node)
			}
		}
	}
	if bestD < 0 {
		return false
	}
	c.apply(bestD, bestDPl, bestDT)
	c.apply(j, bestJPl, bestJT)
	return true
}

// stealNodes bounds the nodes a job without GPUs looks at for a donor.
const stealNodes = 64

// plus returns pl with one more replica on node n.
func (c *climber) plus(pl Placement, n int) Placement {
	out := make(Placement, 0, len(pl)+1)
	added := false
	for _, nc := range pl {
		if nc.Node == n {
			nc.Count++
			added = true
		}
		out = append(out, nc)
	}
	if !added {
		out = append(out, NodeCount{Node: n, Count: 1})
		sortByNode(out)
	}
	return out
}

// countOn is pl's count on node n.
func countOn(pl Placement, n int) int {
	for _, nc := range pl {
		if nc.Node == n {
			return nc.Count
		}
	}
	return 0
}
