package optimizer

import (
	"math"
	"slices"
)

// The GPU-type-aware policies (Sia and HetPollux) both reduce a round to a
// multiple-choice knapsack: every job takes at most one option, an option
// being a GPU count on one GPU type at a cost, not running costs the job
// its own penalty, and each type's options must fit in its GPUs. The cost
// is separable over jobs, so the whole round is one small integer program.

// option is one choice of a job: size GPUs of type typ (an index into the
// round's types) at cost cost. tag is the caller's label.
type option struct {
	typ, size int
	cost      float64
	tag       int
}

// choiceItem is one job: its options, the cost of taking none, and, if
// forced >= 0, the only option it may take (a job that must keep its
// allocation).
type choiceItem struct {
	none   float64
	opts   []option
	forced int
}

// choiceSolution is the solver's answer: pick[j] indexes items[j].opts or
// is -1 (no option); cost is the total; bound is a lower bound on the
// optimum (equal to cost when exact).
type choiceSolution struct {
	pick        []int
	cost, bound float64
	exact       bool
}

// defaultExactStates bounds the dynamic program: a round whose capacity
// states (the product over types of GPUs + 1) are at most this many is
// solved exactly; a 64-GPU cluster of three types has about 10^4 states,
// twice that cluster about 8 x 10^4.
const defaultExactStates = 1 << 17

// solveChoices picks one option (or none) per item, minimising the total
// cost within caps. Rounds small enough (states <= exactStates) are solved
// exactly by dynamic programming over the used capacity of every type;
// larger ones by Lagrangian relaxation of the capacities, a greedy repair
// and local search, with the relaxation's bound reported.
func solveChoices(items []choiceItem, caps []int, exactStates int) choiceSolution {
	return solveChoicesWithin(items, caps, [][]int{caps}, exactStates)[0]
}

// pruneOptions lists the options of it worth considering: for a forced item
// only its forced option; otherwise, per type, an option is dropped when a
// smaller one of the same type costs no more, and options costing more
// than running nothing are dropped. The result is in option order.
func pruneOptions(it *choiceItem) []int {
	if it.forced >= 0 {
		return []int{it.forced}
	}
	idx := make([]int, 0, len(it.opts))
	for i := range it.opts {
		idx = append(idx, i)
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		oa, ob := it.opts[a], it.opts[b]
		if oa.typ != ob.typ {
			return oa.typ - ob.typ
		}
		return oa.size - ob.size
	})
	var keep []int
	bestTyp, best := -1, math.Inf(1)
	for _, i := range idx {
		o := it.opts[i]
		if o.typ != bestTyp {
			bestTyp, best = o.typ, math.Inf(1)
		}
		if o.cost < best && o.cost <= it.none && o.size > 0 {
			keep = append(keep, i)
			best = o.cost
		}
	}
	slices.Sort(keep)
	return keep
}

// dpTable is the dynamic program's outcome over capacities caps: the
// least cost of all the items within every capacity u <= caps, and each
// item's choice there.
type dpTable struct {
	stride []int
	last   []float64 // f_J(u), by state
	choice [][]int16 // choice[j][u]: index into pruned[j], or -1
}

// buildDP is the exact dynamic program over used capacities: f_j(u) is
// the least cost of the first j items using at most u of every type.
func buildDP(items []choiceItem, pruned [][]int, caps []int) *dpTable {
	nt := len(caps)
	stride := make([]int, nt)
	states := 1
	for t := nt - 1; t >= 0; t-- {
		stride[t] = states
		states *= caps[t] + 1
	}
	// digit[t][s] is state s's used capacity of type t.
	digit := make([][]int32, nt)
	for t := range digit {
		digit[t] = make([]int32, states)
		for s := 0; s < states; s++ {
			digit[t][s] = int32(s / stride[t] % (caps[t] + 1))
		}
	}
	prev := make([]float64, states)
	cur := make([]float64, states)
	choice := make([][]int16, len(items))
	for j, it := range items {
		opts := pruned[j]
		ch := make([]int16, states)
		forced := it.forced >= 0
		for s := 0; s < states; s++ {
			best, bc := math.Inf(1), int16(-1)
			if !forced {
				best = prev[s] + it.none
			}
			for k, oi := range opts {
				o := it.opts[oi]
				if int(digit[o.typ][s]) < o.size {
					continue
				}
				if v := prev[s-o.size*stride[o.typ]] + o.cost; v < best {
					best, bc = v, int16(k)
				}
			}
			cur[s], ch[s] = best, bc
		}
		choice[j] = ch
		prev, cur = cur, prev
	}
	return &dpTable{stride: stride, last: prev, choice: choice}
}

// solution is the optimum within capacities within (each at most the
// table's own): f is "at most u", so one table answers every smaller
// capacity exactly.
func (tab *dpTable) solution(items []choiceItem, pruned [][]int, within []int) choiceSolution {
	s := 0
	for t, c := range within {
		s += c * tab.stride[t]
	}
	sol := choiceSolution{pick: make([]int, len(items)), exact: true}
	sol.cost = tab.last[s]
	sol.bound = sol.cost
	for j := len(items) - 1; j >= 0; j-- {
		k := tab.choice[j][s]
		if k < 0 {
			sol.pick[j] = -1
			continue
		}
		o := items[j].opts[pruned[j][k]]
		sol.pick[j] = pruned[j][k]
		s -= o.size * tab.stride[o.typ]
	}
	return sol
}

// solveChoicesWithin solves the same items for several capacities, each
// at most caps: exactly from one dynamic program over caps when it is
// small enough (states <= exactStates), else one Lagrangian relaxation
// per capacity.
func solveChoicesWithin(items []choiceItem, caps []int, within [][]int, exactStates int) []choiceSolution {
	pruned := make([][]int, len(items))
	for j := range items {
		pruned[j] = pruneOptions(&items[j])
	}
	states := 1.0
	for _, c := range caps {
		states *= float64(c + 1)
	}
	out := make([]choiceSolution, len(within))
	if states <= float64(exactStates) {
		tab := buildDP(items, pruned, caps)
		for i, w := range within {
			out[i] = tab.solution(items, pruned, w)
		}
		return out
	}
	for i, w := range within {
		out[i] = solveLagrangian(items, pruned, w)
	}
	return out
}

// lagrangianIters is how many subgradient steps the relaxation takes.
const lagrangianIters = 120

// solveLagrangian relaxes the capacities with one multiplier per type,
// maximises the dual by subgradient steps, then repairs the best
// multipliers' choices into a feasible solution and improves it by local
// search (moving one item to a better option that fits).
func solveLagrangian(items []choiceItem, pruned [][]int, caps []int) choiceSolution {
	nt := len(caps)
	mu := make([]float64, nt)
	bestMu := make([]float64, nt)
	used := make([]int, nt)
	pick := make([]int, len(items))
	bound := math.Inf(-1)
	// A scale for the steps: the typical cost per GPU.
	scale := 0.0
	n := 0
	for j, it := range items {
		for _, oi := range pruned[j] {
			o := it.opts[oi]
			scale += math.Abs(it.none-o.cost) / float64(o.size)
			n++
		}
	}
	if n > 0 {
		scale /= float64(n)
	}
	if scale == 0 {
		scale = 1
	}
	relax := func(mu []float64) float64 {
		clear(used)
		total := 0.0
		for j, it := range items {
			best, bp := math.Inf(1), -1
			if it.forced < 0 {
				best = it.none
			}
			for _, oi := range pruned[j] {
				o := it.opts[oi]
				if v := o.cost + mu[o.typ]*float64(o.size); v < best {
					best, bp = v, oi
				}
			}
			pick[j] = bp
			if bp >= 0 {
				used[it.opts[bp].typ] += it.opts[bp].size
			}
			total += best
		}
		for t := range mu {
			total -= mu[t] * float64(caps[t])
		}
		return total
	}
	step := scale
	for iter := 0; iter < lagrangianIters; iter++ {
		v := relax(mu)
		if v > bound {
			bound = v
			copy(bestMu, mu)
		}
		norm := 0.0
		for t := range mu {
			g := float64(used[t] - caps[t])
			norm += g * g
		}
		if norm == 0 {
			break
		}
		for t := range mu {
			mu[t] = math.Max(0, mu[t]+step*float64(used[t]-caps[t])/math.Sqrt(norm))
		}
		step *= 0.95
	}
	relax(bestMu)
	sol := choiceSolution{pick: slices.Clone(pick), bound: bound}
	repairChoices(items, pruned, caps, sol.pick)
	improveChoices(items, pruned, caps, sol.pick)
	ejectChoices(items, pruned, caps, sol.pick)
	for j, it := range items {
		if p := sol.pick[j]; p >= 0 {
			sol.cost += it.opts[p].cost
		} else {
			sol.cost += it.none
		}
	}
	sol.exact = sol.cost <= sol.bound+1e-9*math.Max(1, math.Abs(sol.cost))
	return sol
}

// usage sums the picked sizes per type.
func usage(items []choiceItem, pick []int, nt int) []int {
	used := make([]int, nt)
	for j, p := range pick {
		if p >= 0 {
			o := items[j].opts[p]
			used[o.typ] += o.size
		}
	}
	return used
}

// repairChoices makes pick fit caps: while a type is over, the item on it
// whose cheapest smaller alternative (a smaller option of any type that
// still fits, or none) costs least per GPU freed switches to it. Forced
// items never move.
func repairChoices(items []choiceItem, pruned [][]int, caps []int, pick []int) {
	used := usage(items, pick, len(caps))
	for {
		over := -1
		for t := range caps {
			if used[t] > caps[t] {
				over = t
				break
			}
		}
		if over < 0 {
			return
		}
		bestJ, bestAlt := -1, -2
		bestRate := math.Inf(1)
		for j, p := range pick {
			it := &items[j]
			if p < 0 || it.forced >= 0 || it.opts[p].typ != over {
				continue
			}
			cur := it.opts[p]
			try := func(alt int) {
				dc, freed := 0.0, cur.size
				if alt < 0 {
					dc = it.none - cur.cost
				} else {
					o := it.opts[alt]
					if o.typ == over {
						if o.size >= cur.size {
							return
						}
						freed = cur.size - o.size
					} else if used[o.typ]+o.size > caps[o.typ] {
						return
					}
					dc = o.cost - cur.cost
				}
				if r := dc / float64(freed); r < bestRate {
					bestRate, bestJ, bestAlt = r, j, alt
				}
			}
			try(-1)
			for _, oi := range pruned[j] {
				if oi != p {
					try(oi)
				}
			}
		}
		if bestJ < 0 {
			return // only forced items are left on the type
		}
		cur := items[bestJ].opts[pick[bestJ]]
		used[cur.typ] -= cur.size
		if bestAlt >= 0 {
			o := items[bestJ].opts[bestAlt]
			used[o.typ] += o.size
		}
		pick[bestJ] = bestAlt
	}
}

// improveChoices moves items, one at a time, to the cheapest option that
// fits in the capacity left, until no move lowers the cost.
func improveChoices(items []choiceItem, pruned [][]int, caps []int, pick []int) {
	used := usage(items, pick, len(caps))
	for pass := 0; pass < 8; pass++ {
		moved := false
		for j := range items {
			it := &items[j]
			if it.forced >= 0 {
				continue
			}
			curCost, curTyp, curSize := it.none, -1, 0
			if p := pick[j]; p >= 0 {
				o := it.opts[p]
				curCost, curTyp, curSize = o.cost, o.typ, o.size
			}
			best, bp := curCost, pick[j]
			if it.none < best {
				best, bp = it.none, -1
			}
			for _, oi := range pruned[j] {
				o := it.opts[oi]
				free := caps[o.typ] - used[o.typ]
				if o.typ == curTyp {
					free += curSize
				}
				if o.size <= free && o.cost < best {
					best, bp = o.cost, oi
				}
			}
			if bp != pick[j] && best < curCost {
				if curTyp >= 0 {
					used[curTyp] -= curSize
				}
				if bp >= 0 {
					used[it.opts[bp].typ] += it.opts[bp].size
				}
				pick[j] = bp
				moved = true
			}
		}
		if !moved {
			return
		}
	}
}

// offer is a cheaper option an item could fall back to, freeing GPUs of
// its type.
type offer struct {
	item, alt int
	dcost     float64
	freed     int
}

// ejectChoices moves an item to a better option that does not fit by
// taking the GPUs it lacks from others of the type, each falling back to
// the option (or none) that costs least per GPU freed, when the exchange
// lowers the total; then refills with improveChoices.
func ejectChoices(items []choiceItem, pruned [][]int, caps []int, pick []int) {
	nt := len(caps)
	for pass := 0; pass < 4; pass++ {
		used := usage(items, pick, nt)
		offers := make([][]offer, nt)
		for i, p := range pick {
			it := &items[i]
			if p < 0 || it.forced >= 0 {
				continue
			}
			cur := it.opts[p]
			best := offer{item: i, alt: -1, dcost: it.none - cur.cost, freed: cur.size}
			for _, oi := range pruned[i] {
				o := it.opts[oi]
				if o.typ != cur.typ || o.size >= cur.size {
					continue
				}
				of := offer{item: i, alt: oi, dcost: o.cost - cur.cost, freed: cur.size - o.size}
				if of.dcost/float64(of.freed) < best.dcost/float64(best.freed) {
					best = of
				}
			}
			offers[cur.typ] = append(offers[cur.typ], best)
		}
		for t := range offers {
			slices.SortStableFunc(offers[t], func(a, b offer) int {
				ra, rb := a.dcost/float64(a.freed), b.dcost/float64(b.freed)
				switch {
				case ra < rb:
					return -1
				case ra > rb:
					return 1
				}
				return 0
			})
		}
		touched := make([]bool, len(items))
		improved := false
		for j := range items {
			it := &items[j]
			if it.forced >= 0 || touched[j] {
				continue
			}
			curCost, curTyp, curSize := it.none, -1, 0
			if p := pick[j]; p >= 0 {
				curCost, curTyp, curSize = it.opts[p].cost, it.opts[p].typ, it.opts[p].size
			}
			for _, oi := range pruned[j] {
				o := it.opts[oi]
				if o.cost >= curCost {
					continue
				}
				need := used[o.typ] + o.size - caps[o.typ]
				if o.typ == curTyp {
					need -= curSize
				}
				if need <= 0 {
					continue
				}
				total, freed := o.cost-curCost, 0
				var chosen []offer
				for _, of := range offers[o.typ] {
					if of.item == j || touched[of.item] {
						continue
					}
					chosen = append(chosen, of)
					total += of.dcost
					freed += of.freed
					if freed >= need || total >= 0 {
						break
					}
				}
				if freed < need || total >= -1e-12*(1+math.Abs(curCost)) {
					continue
				}
				for _, of := range chosen {
					used[o.typ] -= of.freed
					pick[of.item] = of.alt
					touched[of.item] = true
				}
				if curTyp >= 0 {
					used[curTyp] -= curSize
				}
				used[o.typ] += o.size
				pick[j] = oi
				touched[j] = true
				improved = true
				break
			}
		}
		improveChoices(items, pruned, caps, pick)
		if !improved {
			return
		}
	}
}
