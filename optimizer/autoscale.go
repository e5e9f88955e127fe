package optimizer

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"pollux/optimizer/goodput"
)

// Utility thresholds of the Pollux artifact's cluster autoscaler
// (adaptdl_sched/policy/pollux.py: _min_util and _max_util): the cluster
// keeps its size while the best allocation's utility lies between them and
// otherwise moves to the size whose utility is nearest their midpoint.
const (
	DefaultLowUtil  = 0.35
	DefaultHighUtil = 0.65
)

// maxSizeCandidates bounds how many cluster sizes one autoscaling round
// evaluates (evenly spaced when the range is wider).
const maxSizeCandidates = 64

// virtualPrefix starts the IDs of the virtual nodes an autoscaling round
// adds beyond the real ones (the artifact names them "~1", "~2", ...).
const virtualPrefix = "~virtual-"

// Autoscale are the cluster-size settings of an autoscaling policy.
type Autoscale struct {
	// Template is the node a scale-up adds (its ID is ignored): the
	// virtual nodes beyond the real ones are copies of it.
	Template Node `json:"template"`
	// MinNodes and MaxNodes bound the desired size.
	MinNodes int `json:"min_nodes"`
	MaxNodes int `json:"max_nodes"`
	// LowUtil and HighUtil are the utility band within which the cluster
	// keeps its size; zero values mean DefaultLowUtil and DefaultHighUtil.
	LowUtil  float64 `json:"low_util,omitempty"`
	HighUtil float64 `json:"high_util,omitempty"`
}

// withDefaults fills the zero utility thresholds.
func (a Autoscale) withDefaults() Autoscale {
	if a.LowUtil == 0 && a.HighUtil == 0 {
		a.LowUtil, a.HighUtil = DefaultLowUtil, DefaultHighUtil
	}
	return a
}

// Validate reports whether the settings are usable.
func (a Autoscale) Validate() error {
	a = a.withDefaults()
	switch {
	case a.Template.GPUs < 1:
		return fmt.Errorf("%w: node template has %d GPUs, want at least 1", ErrBadAutoscale, a.Template.GPUs)
	case a.MinNodes < 0:
		return fmt.Errorf("%w: minimum of %d nodes, want at least 0", ErrBadAutoscale, a.MinNodes)
	case a.MaxNodes < 1:
		return fmt.Errorf("%w: maximum of %d nodes, want at least 1", ErrBadAutoscale, a.MaxNodes)
	case a.MinNodes > a.MaxNodes:
		return fmt.Errorf("%w: minimum of %d nodes above the maximum of %d", ErrBadAutoscale, a.MinNodes, a.MaxNodes)
	case !(a.LowUtil > 0 && a.LowUtil <= a.HighUtil && a.HighUtil <= 1):
		return fmt.Errorf("%w: utility band [%v, %v], want 0 < low <= high <= 1", ErrBadAutoscale, a.LowUtil, a.HighUtil)
	}
	return nil
}

// clamp bounds a node count by the settings.
func (a Autoscale) clamp(n int) int { return min(max(n, a.MinNodes), a.MaxNodes) }

// ScaleDecision is an autoscaling policy's cluster size for after the
// round, with what it was chosen from.
type ScaleDecision struct {
	// Nodes is the desired number of nodes, within [MinNodes, MaxNodes].
	Nodes int `json:"nodes"`
	// Current is how many (real) nodes the snapshot had.
	Current int `json:"current"`
	// Utility is the utility of the front point Nodes was chosen for (0
	// when the size was kept or no front was computed).
	Utility float64 `json:"utility"`
	// Front is the Pareto front of (size, fitness) the rule chose from,
	// by size; nil for policies that size the cluster otherwise.
	Front []SizePoint `json:"front,omitempty"`
}

// SizePoint is the best allocation found on the first Nodes nodes of the
// cluster (real nodes first, then virtual copies of the template).
type SizePoint struct {
	// Nodes is the cluster size the allocation needs: its highest used
	// node plus one.
	Nodes int `json:"nodes"`
	// Fitness is the Pollux objective of the allocation, normalised over
	// the whole extended cluster so that sizes compare.
	Fitness float64 `json:"fitness"`
	// Utility is the goodput the jobs get per GPU held: the sum of their
	// speedups over one GPU divided by the GPUs of the nodes in use.
	Utility float64 `json:"utility"`
}

// DesiredNodes is the Pollux artifact's cluster-size rule
// (PolluxPolicy._desired_nodes) over front, the Pareto front of (size,
// fitness) points, on a cluster of current nodes with utility band [low,
// high]: keep the size while the fittest point that fits has a utility in
// the band, else walk the front by size towards the band's midpoint
// (docs/policies.md, "The size rule"). The caller clamps the result.
func DesiredNodes(front []SizePoint, current int, low, high float64) int {
	pts := slices.Clone(front)
	slices.SortStableFunc(pts, func(a, b SizePoint) int { return a.Nodes - b.Nodes })
	keep := -1
	for i, pt := range pts {
		if pt.Nodes <= current && (keep < 0 || pt.Fitness > pts[keep].Fitness) {
			keep = i
		}
	}
	if keep >= 0 && low <= pts[keep].Utility && pts[keep].Utility <= high {
		return current
	}
	target := (low + high) / 2
	bestUtil, bestFit, bestNodes := math.Inf(1), 0.0, current
	for _, pt := range pts {
		switch {
		case pt.Utility > bestUtil && pt.Fitness > bestFit:
		case pt.Utility < bestUtil && pt.Fitness < bestFit:
			continue
		case math.Abs(pt.Utility-target) < math.Abs(bestUtil-target):
		default:
			continue
		}
		bestUtil, bestFit, bestNodes = pt.Utility, pt.Fitness, pt.Nodes
	}
	return bestNodes
}

// Sizer is a policy that can decide the cluster size as well as the
// allocation: Autoscaled solves its round at every candidate size. Pollux
// (on one GPU type) and HetPollux (on several) are the two.
type Sizer interface {
	Policy
	// checkSizing refuses settings (already validated) the policy cannot
	// size a cluster with.
	checkSizing(s Autoscale) error
	// sizes solves a round of at least one job at every candidate size
	// of snap's cluster extended with copies of s's template. It returns
	// the Pareto front of (size, fitness), by size, and the round's
	// Result for front point i (-1: none), placed on real nodes only.
	sizes(snap *Snapshot, prev *State, s Autoscale) ([]SizePoint, func(i int) Result, error)
}

// Autoscaled is a Sizer deciding the cluster size as well as the
// allocation, as the Pollux artifact's policy does in the cloud: it
// picks the size from the policy's rounds at every candidate size by the
// utility rule of DesiredNodes, and allocates the real nodes with the
// fittest front point within min(current, desired) nodes (jobs wait for
// nodes still to come). Result.Scale carries the decision.
// docs/policies.md describes how each Sizer values the sizes.
type Autoscaled struct {
	// Policy solves the rounds (its settings, budget and cache apply).
	Policy Sizer
	// Settings bound and shape the cluster.
	Settings Autoscale
}

// NewAutoscaled returns p deciding the cluster size with settings s.
func NewAutoscaled(p Sizer, s Autoscale) *Autoscaled { return &Autoscaled{Policy: p, Settings: s} }

// Name implements Policy: the inner policy's name and "-autoscale".
func (a *Autoscaled) Name() string {
	if a.Policy == nil {
		return "autoscale"
	}
	return a.Policy.Name() + "-autoscale"
}

// Allocate implements Policy.
func (a *Autoscaled) Allocate(snap *Snapshot, prev *State) (Result, error) {
	s := a.Settings.withDefaults()
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	if a.Policy == nil {
		return Result{}, fmt.Errorf("%w: no policy to size the cluster with", ErrBadAutoscale)
	}
	if err := a.Policy.checkSizing(s); err != nil {
		return Result{}, err
	}
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	nReal := len(snap.Nodes)
	if len(snap.Jobs) == 0 {
		return Result{Placements: []Placement{}, Scale: &ScaleDecision{Nodes: s.clamp(0), Current: nReal}}, nil
	}
	front, result, err := a.Policy.sizes(snap, prev, s)
	if err != nil {
		return Result{}, err
	}
	desired := DesiredNodes(front, nReal, s.LowUtil, s.HighUtil)
	dec := &ScaleDecision{Nodes: s.clamp(desired), Current: nReal, Front: front}
	chosen := -1
	for i, pt := range front {
		if pt.Nodes <= min(nReal, desired) && (chosen < 0 || pt.Fitness > front[chosen].Fitness) {
			chosen = i
		}
		if pt.Nodes <= dec.Nodes {
			dec.Utility = pt.Utility
		}
	}
	res := result(chosen)
	res.Scale = dec
	return res, nil
}

// sized is the best allocation found on the first n nodes.
type sized struct {
	n     int
	alloc []Placement
	fit   float64
}

// checkSizing implements Sizer: Pollux sizes with any valid settings.
func (p *Pollux) checkSizing(Autoscale) error { return nil }

// sizes implements Sizer: it searches allocations restricted to the
// first N nodes of the cluster extended with virtual copies of the
// template up to MaxNodes, for every N (the search's own for the real
// size, hill-climbed neighbours for the others). The round's search
// state covers the extended cluster.
func (p *Pollux) sizes(snap *Snapshot, prev *State, s Autoscale) ([]SizePoint, func(int) Result, error) {
	nReal := len(snap.Nodes)
	ext, err := extend(snap, s.Template, max(nReal, s.MaxNodes))
	if err != nil {
		return nil, nil, err
	}
	// The search is flat: the virtual nodes belong to no rack of the real
	// ones, and the search rack by rack knows nothing of masked nodes.
	flat := *p
	flat.Hierarchy = HierarchyFlat
	q := &flat
	obj, err := newObjective(ext, q.PowerMean, q.Cache, q.MeasuredRestart)
	if err != nil {
		return nil, nil, err
	}
	defer q.Cache.endRound()
	full := newProblem(obj)
	res := q.search(obj, full.masked(nReal), ext, prev)

	// The best allocation on the first n nodes for every candidate n: the
	// search's own for the real nodes, hill-climbed neighbours for the
	// others (upwards from the next smaller size, downwards from the next
	// larger one cut to the first n nodes).
	found := &sized{n: nReal, alloc: res.Placements, fit: obj.Fitness(res.Placements)}
	sizes := sizeCandidates(max(s.MinNodes, 1), len(ext.Nodes), nReal, maxSizeCandidates)
	w := full.newWorker()
	var up, down []*sized
	below := found
	for _, n := range sizes {
		if n <= nReal {
			continue
		}
		below = climbSized(full.masked(n), w, ext.Seed, n, below)
		up = append(up, below)
	}
	above := found
	for i := len(sizes) - 1; i >= 0; i-- {
		n := sizes[i]
		if n >= nReal {
			continue
		}
		above = climbSized(full.masked(n), w, ext.Seed, n, above)
		down = append(down, above)
	}
	all := append(append([]*sized{}, down...), up...)
	if nReal >= 1 {
		all = append(all, found)
	}
	front, allocs := frontOf(q.Cache, ext, all)
	result := func(chosen int) Result {
		res.Placements = make([]Placement, len(snap.Jobs))
		if chosen >= 0 {
			for j, pl := range allocs[chosen] {
				res.Placements[j] = slices.Clone(pl)
			}
		}
		res.Diagnostics.Fitness = obj.Fitness(res.Placements)
		return res
	}
	return front, result, nil
}

// extend returns snap with virtual copies of template appended up to
// total nodes.
func extend(snap *Snapshot, template Node, total int) (*Snapshot, error) {
	ext := *snap
	ext.Nodes = make([]Node, 0, total)
	ext.Nodes = append(ext.Nodes, snap.Nodes...)
	ids := make(map[string]bool, len(snap.Nodes))
	for _, n := range snap.Nodes {
		ids[n.ID] = true
	}
	for i := 1; len(ext.Nodes) < total; i++ {
		id := virtualPrefix + strconv.Itoa(i)
		if ids[id] {
			return nil, fmt.Errorf("%w: node id %q is reserved for virtual nodes", ErrBadSnapshot, id)
		}
		ext.Nodes = append(ext.Nodes, Node{ID: id, GPUs: template.GPUs, Type: template.Type, Topology: template.Topology})
	}
	return &ext, nil
}

// sizeCandidates lists the cluster sizes to evaluate in [lo, hi]: all of
// them, or at most most evenly spaced ones (always with lo,
// hi and real when real is within the range).
func sizeCandidates(lo, hi, real, most int) []int {
	if hi < lo {
		return nil
	}
	step := max(1, (hi-lo+most-1)/most)
	var out []int
	for n := lo; n <= hi; n += step {
		out = append(out, n)
	}
	if out[len(out)-1] != hi {
		out = append(out, hi)
	}
	if real >= lo && real <= hi && !slices.Contains(out, real) {
		out = append(out, real)
		slices.Sort(out)
	}
	return out
}

// climbSized returns from cut to the first n nodes (repaired by pr, which
// masks the others) and hill-climbed there.
func climbSized(pr *problem, w *worker, seed uint64, n int, from *sized) *sized {
	w.pr = pr
	ind := pr.newIndiv()
	copy(ind.alloc, from.alloc)
	w.reseed(seed, 1<<32+uint64(n), 0)
	w.clearTouched()
	w.repair(ind)
	pr.evaluate(ind)
	pr.newClimber().improve(ind)
	return &sized{n: n, alloc: ind.alloc, fit: ind.fit}
}

// frontOf turns the per-size allocations into the Pareto front of (size,
// fitness) with each point's utility, by size, and the allocations of
// the points.
func frontOf(cache *SpeedupCache, ext *Snapshot, all []*sized) ([]SizePoint, [][]Placement) {
	type cand struct {
		size  int
		fit   float64
		alloc []Placement
	}
	cands := make([]cand, 0, len(all))
	for _, sd := range all {
		size := 0
		for _, pl := range sd.alloc {
			for _, nc := range pl {
				size = max(size, nc.Node+1)
			}
		}
		cands = append(cands, cand{size, sd.fit, sd.alloc})
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		if a.size != b.size {
			return a.size - b.size
		}
		switch {
		case a.fit > b.fit:
			return -1
		case a.fit < b.fit:
			return 1
		}
		return 0
	})
	unit := make([]unitFn, len(ext.Jobs))
	for j := range ext.Jobs {
		unit[j] = cache.unitSpeed(&ext.Jobs[j])
	}
	var front []SizePoint
	var allocs [][]Placement
	for _, c := range cands {
		if len(front) > 0 && c.fit <= front[len(front)-1].Fitness {
			continue // dominated: as fit or fitter with fewer nodes
		}
		front = append(front, SizePoint{Nodes: c.size, Fitness: c.fit, Utility: utility(ext, unit, c.alloc)})
		allocs = append(allocs, c.alloc)
	}
	return front, allocs
}

// utility is the artifact's cluster utility of an allocation: every job's
// speedup over one GPU, summed, divided by the GPUs of the nodes that host
// at least one replica (0 when none does).
func utility(snap *Snapshot, unit []unitFn, alloc []Placement) float64 {
	used := make(map[int]bool)
	sum := 0.0
	for j, pl := range alloc {
		if len(pl) == 0 {
			continue
		}
		sum += unit[j].at(pl.Nodes(), pl.Replicas())
		for _, nc := range pl {
			used[nc.Node] = true
		}
	}
	gpus := 0
	for n := range used {
		gpus += snap.Nodes[n].GPUs
	}
	if gpus == 0 {
		return 0
	}
	return sum / float64(gpus)
}

// unitFn is a job's speedup over one GPU: base times its speedup over
// its base configuration (one node, base GPUs), or linear without a
// model.
type unitFn struct {
	s    *goodput.Speedup
	base float64
}

func (f unitFn) at(n, k int) float64 {
	if k <= 0 || n <= 0 {
		return 0
	}
	if f.s == nil {
		return float64(k)
	}
	return f.base * f.s.At(n, k)
}

// unitSpeed is job's speedup over one GPU on one node: the artifact's
// utility divides it by the replicas to measure how close to linear a job
// scales. A job without a model counts as linear. When one GPU cannot hold
// any admissible batch, the base is the fewest GPUs of one node that can,
// counted as linear up to there (and a job feasible on none as linear).
func (c *SpeedupCache) unitSpeed(job *Job) unitFn {
	if job.Model == nil {
		return unitFn{}
	}
	for k0 := 1; k0 <= goodput.MemoReplicas; k0++ {
		// Every smaller base was infeasible, so a base of k0 works at k0
		// itself or not at all.
		if f, err := c.get(job, 1, k0); err == nil {
			return unitFn{s: f.s, base: float64(k0)}
		}
	}
	return unitFn{}
}
