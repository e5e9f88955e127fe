package optimizer

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"pollux/optimizer/goodput"
)

// HetPollux is Pollux made aware of GPU types ("pollux-het"): the power
// mean of every job's goodput speedup over its fair share, searched over a
// GPU type and a GPU count per job as one multiple-choice knapsack, with
// batch sizes co-adapted to every candidate and restart penalties from
// the jobs' measured delays. docs/policies.md describes its goodputs,
// penalties, weights and solver.
type HetPollux struct {
	// PowerMean is the fairness exponent p (negative: fairer).
	PowerMean float64
	// DefaultRestart is the restart delay, in seconds, assumed for a job
	// that has not measured one.
	DefaultRestart float64
	// ExactStates bounds the exact solver (0: the default).
	ExactStates int
	// RestartWeight multiplies the measured restart delay in the penalty
	// (0: 1): a reallocation also disturbs the jobs around it, and a job
	// changed now is likely to be changed again.
	RestartWeight float64
	// Horizon, in (weighted) restart delays, is the least lifetime the
	// penalty assumes a job has ahead of it: Pollux's factor uses the
	// age, which for a job a few minutes old would forbid growing.
	Horizon float64
	// Cache, if set, memoises goodputs from round to round.
	Cache *GoodputCache
	// Optimism is the exponent of the goodput assumed beyond the GPU
	// counts a job was measured on (0: none).
	Optimism float64
	// AgeLevel, in seconds, is the length of the first age level (0: no
	// age weights); level l spans ages [(2^l - 1), (2^(l+1) - 1)) times
	// AgeLevel, and a job's term is weighted by 2^(-AgeDecay * l), at
	// least AgeFloor.
	AgeLevel, AgeDecay, AgeFloor float64
	// ShrinkFactor (in (0, 1]; 0: 1) further discounts an option giving
	// a running job less goodput than its current configuration.
	ShrinkFactor float64
	// ShareByBest normalises a job's speedups by its fair share on its
	// best type rather than by the average over the types: a job then
	// counts as well served only on the type it runs fastest on, and the
	// jobs that lose most on a slow type are the last put there.
	ShareByBest bool
	// ProjectCompute projects a job's model to a type it has not run on
	// by scaling only the model's compute terms by the one-GPU
	// throughput ratio (a slower GPU computes slower, the network is the
	// same); else the whole goodput is scaled by that ratio.
	ProjectCompute bool
	// RemainLevel, in seconds, is the length of the first level of
	// estimated remaining time (0: none). A job that reports its
	// Progress f > 0 is estimated to need Age * (1 - f) / f more
	// seconds (its pace so far), and its term of the power mean is
	// weighted by the levels of that time instead of its age: 1 below
	// RemainLevel, then 2^(-RemainDecay) per level, each level twice as
	// long as the previous one, at least RemainFloor. Nearly done jobs
	// then weigh most (shortest remaining time first), young ones by
	// their age until they report progress.
	RemainLevel, RemainDecay, RemainFloor float64
	// RemainRestart further discounts a changed configuration of a job
	// that reports its progress by remaining / (remaining + delay): a
	// job near its end does not pay a restart to grow, and is the last
	// one shrunk.
	RemainRestart bool
}

// HetPollux defaults.
const (
	// HetPowerMean is pollux-het's fairness exponent.
	HetPowerMean = -0.25
	// HetRestartWeight and HetHorizon shape its restart penalty.
	HetRestartWeight = 2.0
	HetHorizon       = 20.0
	// HetOptimism is its exploration optimism.
	HetOptimism = 0.5
	// HetAgeLevel (s), HetAgeDecay and HetAgeFloor are its age weights:
	// half an hour at weight 1, then 1/sqrt(2) per doubling, at least
	// 0.35 (from 7.5 h on).
	HetAgeLevel = 1800.0
	HetAgeDecay = 0.5
	HetAgeFloor = 0.35
	// HetShrinkFactor is its extra discount of a shrink.
	HetShrinkFactor = 0.8
	// HetRemainLevel (s), HetRemainDecay and HetRemainFloor are its
	// remaining-time weights, the levels of the age weights on the
	// estimated remaining time of a job that reports its progress.
	HetRemainLevel = 1800.0
	HetRemainDecay = 0.5
	HetRemainFloor = 0.35
)

// NewHetPollux returns the policy with its defaults.
func NewHetPollux() *HetPollux {
	return &HetPollux{
		PowerMean: HetPowerMean, DefaultRestart: RestartDelay,
		RestartWeight: HetRestartWeight, Horizon: HetHorizon, Optimism: HetOptimism,
		AgeLevel: HetAgeLevel, AgeDecay: HetAgeDecay, AgeFloor: HetAgeFloor,
		ShrinkFactor: HetShrinkFactor, ShareByBest: true, ProjectCompute: true,
		RemainLevel: HetRemainLevel, RemainDecay: HetRemainDecay, RemainFloor: HetRemainFloor, RemainRestart: true,
		Cache: &GoodputCache{},
	}
}

// Name implements Policy.
func (h *HetPollux) Name() string { return "pollux-het" }

// GPUTypeAware implements TypeAware.
func (h *HetPollux) GPUTypeAware() {}

// hetOption is one (type, GPU count) of a job.
type hetOption struct {
	typ, k int
}

// Allocate implements Policy.
func (h *HetPollux) Allocate(snap *Snapshot, _ *State) (Result, error) {
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	tp, err := check(snap)
	if err != nil {
		return Result{}, err
	}
	if err := h.checkSettings(); err != nil {
		return Result{}, err
	}
	types := roundTypes(snap)
	caps := make([]int, len(types))
	total := 0
	for t, ti := range types {
		caps[t] = ti.total
		total += ti.total
	}
	res := Result{Placements: make([]Placement, len(snap.Jobs))}
	if len(snap.Jobs) == 0 {
		return res, nil
	}
	norm := newHetNorm(snap, types)
	items := make([]choiceItem, len(snap.Jobs))
	for j := range snap.Jobs {
		items[j], _ = h.jobItem(snap, &snap.Jobs[j], types, norm)
		capRequired(snap, tp, types, j, &items[j])
	}
	h.Cache.Sweep()
	exact := h.ExactStates
	if exact <= 0 {
		exact = defaultExactStates
	}
	sol := solveChoices(items, caps, exact)
	res.Diagnostics.Objective, res.Diagnostics.Bound, res.Diagnostics.Exact = sol.cost, sol.bound, sol.exact
	want := make([]hetOption, len(snap.Jobs))
	for j, p := range sol.pick {
		want[j] = hetOption{typ: -1}
		if p >= 0 {
			o := items[j].opts[p]
			want[j] = hetOption{typ: o.typ, k: o.size}
		}
	}
	for t := range types {
		placeType(snap, tp, types[t], t, want, res.Placements)
	}
	return res, nil
}

// checkSettings refuses exponents and age levels the policy cannot use.
func (h *HetPollux) checkSettings() error {
	if math.IsNaN(h.PowerMean) || math.IsInf(h.PowerMean, 0) {
		return fmt.Errorf("%w: power-mean exponent %v", ErrBadSnapshot, h.PowerMean)
	}
	for _, v := range []float64{h.AgeLevel, h.AgeDecay, h.AgeFloor, h.ShrinkFactor, h.RemainLevel, h.RemainDecay, h.RemainFloor} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: age levels %v, %v, %v, shrink factor %v or remaining-time levels %v, %v, %v: want finite values of at least 0",
				ErrBadSnapshot, h.AgeLevel, h.AgeDecay, h.AgeFloor, h.ShrinkFactor, h.RemainLevel, h.RemainDecay, h.RemainFloor)
		}
	}
	return nil
}

// hetNorm is what normalises a job's goodputs into its term of the power
// mean: the fair share of kFair GPUs, valued on every type t <
// len(totals) weighted by totals[t] GPUs, and scale (nodes per GPU).
// untyped, if at least 0, is the type whose goodput a job without a
// model per type takes from its top-level model (a cluster of one type).
type hetNorm struct {
	kFair   int
	scale   float64
	totals  []int
	untyped int
}

// newHetNorm is the normalisation of a round on snap's types.
func newHetNorm(snap *Snapshot, types []typeInfo) hetNorm {
	n := hetNorm{totals: make([]int, len(types)), untyped: -1}
	total := 0
	for t, ti := range types {
		n.totals[t] = ti.total
		total += ti.total
	}
	n.kFair = ceilDiv(total, max(len(snap.Jobs), 1))
	n.scale = float64(len(snap.Nodes)) / float64(total)
	if len(types) == 1 {
		n.untyped = 0
	}
	return n
}

// jobGoodput evaluates one job's goodput per type and GPU count.
type jobGoodput struct {
	h      *HetPollux
	job    *Job
	types  []typeInfo
	models []*goodput.Model
	src    int // the type projections start from (-1: no model)
	// proj are, with ProjectCompute, the models projected from src to
	// the types without one (nil where the throughputs are unknown).
	proj []*goodput.Model
}

// newJobGoodput prepares a job's goodputs; cur is the type it runs on (-1
// if none), whose model projections start from when it has one; type
// untyped (if at least 0) takes the job's top-level model when it has no
// model of its own.
func (h *HetPollux) newJobGoodput(job *Job, types []typeInfo, cur, untyped int) *jobGoodput {
	g := &jobGoodput{h: h, job: job, types: types, models: make([]*goodput.Model, len(types)), src: -1}
	for t, ti := range types {
		md := job.TypeModels[ti.name]
		if md == nil && t == untyped {
			md = job.Model
		}
		if md == nil || md.Validate() != nil {
			continue
		}
		g.models[t] = md
		if g.src < 0 || t == cur {
			g.src = t
		}
	}
	if h.ProjectCompute && g.src >= 0 {
		g.proj = make([]*goodput.Model, len(types))
		for t := range types {
			if g.models[t] != nil {
				continue
			}
			if !g.knownRatio(g.src, t) {
				continue
			}
			// A GPU r times slower takes r times longer to compute.
			r := g.ratio(g.src, t)
			md := *g.models[g.src]
			md.Params.AlphaC *= r
			md.Params.BetaC *= r
			if md.Validate() == nil {
				g.proj[t] = &md
			}
		}
	}
	return g
}

// at is the job's goodput on k GPUs of type t, packed onto as few nodes as
// possible.
func (g *jobGoodput) at(t, k int) float64 {
	if g.models[t] != nil {
		return g.modelled(t, k)
	}
	if g.proj != nil && g.proj[t] != nil {
		return g.projected(t, k)
	}
	if g.src >= 0 {
		return g.modelled(g.src, k) * g.ratio(t, g.src)
	}
	return float64(k) * g.oneGPU(t)
}

// modelled is the goodput of k GPUs of type t by its model, packed onto
// as few nodes as possible, optimistic beyond the counts measured there.
func (g *jobGoodput) modelled(t, k int) float64 {
	ti := g.types[t]
	md := *g.models[t]
	v := g.h.Cache.goodputAt(md, ceilDiv(k, ti.gpusPerNode), k)
	if kp := g.job.TypeReplicas[ti.name]; g.h.Optimism > 0 && kp > 0 && k > kp {
		// Beyond what the job measured the model extrapolates; be
		// optimistic there so that the job explores.
		base := g.h.Cache.goodputAt(md, ceilDiv(kp, ti.gpusPerNode), kp)
		v = math.Max(v, base*math.Pow(float64(k)/float64(kp), g.h.Optimism))
	}
	return v
}

// projected is the goodput of k GPUs of type t by the model projected
// there, optimistic beyond the counts measured on the type it comes from.
func (g *jobGoodput) projected(t, k int) float64 {
	ti := g.types[t]
	md := *g.proj[t]
	v := g.h.Cache.goodputAt(md, ceilDiv(k, ti.gpusPerNode), k)
	if kp := g.job.TypeReplicas[g.types[g.src].name]; g.h.Optimism > 0 && kp > 0 && k > kp {
		base := g.h.Cache.goodputAt(md, ceilDiv(kp, ti.gpusPerNode), kp)
		v = math.Max(v, base*math.Pow(float64(k)/float64(kp), g.h.Optimism))
	}
	return v
}

// knownRatio reports whether the job's one-GPU throughputs on types a
// and b are both known.
func (g *jobGoodput) knownRatio(a, b int) bool {
	return g.job.TypeThroughput[g.types[a].name] > 0 && g.job.TypeThroughput[g.types[b].name] > 0
}

// ratio is type a's one-GPU throughput over type b's (1 if unknown).
func (g *jobGoodput) ratio(a, b int) float64 {
	x, y := g.job.TypeThroughput[g.types[a].name], g.job.TypeThroughput[g.types[b].name]
	if x > 0 && y > 0 {
		return x / y
	}
	return 1
}

// oneGPU is the job's one-GPU throughput on type t (1 if unknown).
func (g *jobGoodput) oneGPU(t int) float64 {
	if x := g.job.TypeThroughput[g.types[t].name]; x > 0 {
		return x
	}
	return 1
}

// jobItem builds a job's options: every (type, GPU count) up to its
// maximum, costed by its term of the power mean normalised by norm; and
// the job's goodputs.
func (h *HetPollux) jobItem(snap *Snapshot, job *Job, types []typeInfo, norm hetNorm) (choiceItem, *jobGoodput) {
	curT, curK := -1, job.Current.Replicas()
	if curK > 0 {
		curT = slices.IndexFunc(types, func(ti typeInfo) bool { return ti.name == snap.TypeOf(job.Current) })
	}
	g := h.newJobGoodput(job, types, curT, norm.untyped)
	// The fair-share goodput, on the best type or averaged over types
	// by their GPUs.
	ref, weight, best := 0.0, 0.0, 0.0
	for t, total := range norm.totals {
		k := min(norm.kFair, total)
		if v := g.at(t, k); v > 0 {
			ref += float64(total) * v
			weight += float64(total)
			best = math.Max(best, v)
		}
	}
	if weight > 0 {
		ref /= weight
	}
	if h.ShareByBest {
		ref = best
	}
	if !(ref > 0) {
		ref = 1
	}
	delay := job.RestartDelay
	if !(delay > 0) {
		delay = h.DefaultRestart
	}
	if h.RestartWeight > 0 {
		delay *= h.RestartWeight
	}
	age := math.Max(job.Age, h.Horizon*delay)
	factor := math.Max(age-float64(job.Restarts)*delay, 0) / (age + delay)
	remain, hasRemain := remaining(job)
	if hasRemain && h.RemainRestart {
		factor *= remain / (remain + delay)
	}
	term := func(x float64) float64 {
		switch h.PowerMean {
		case -1:
			return 1 / (x + meanEps)
		case 0:
			return -math.Log(math.Max(x, meanEps))
		}
		if h.PowerMean > 0 {
			return -math.Pow(x+meanEps, h.PowerMean)
		}
		return math.Pow(x+meanEps, h.PowerMean)
	}
	if w := h.jobWeight(job, remain, hasRemain); w != 1 {
		inner := term
		term = func(x float64) float64 { return w * inner(x) }
	}
	shrink := 1.0
	if h.ShrinkFactor > 0 && h.ShrinkFactor < 1 {
		shrink = h.ShrinkFactor
	}
	curV := 0.0
	if curT >= 0 && curK > 0 {
		curV = g.at(curT, curK)
	}
	it := choiceItem{none: term(0), forced: -1}
	maxK := max(job.MaxReplicas, 1)
	for t, ti := range types {
		if job.GPUType != "" && ti.name != job.GPUType {
			continue
		}
		for k := max(job.MinReplicas, 1); k <= min(maxK, ti.total); k++ {
			v := g.at(t, k)
			if !(v > 0) {
				continue
			}
			x := v / ref * norm.scale
			if t != curT || k != curK {
				x *= factor
				if v < curV {
					x *= shrink
				}
			}
			it.opts = append(it.opts, option{typ: t, size: k, cost: term(x)})
		}
	}
	return it, g
}

// AgeWeight is the weight of the power-mean term of a job of the given
// age (seconds): 1 in the first level (AgeLevel seconds), then
// 2^(-AgeDecay) per level, each level twice as long as the previous one,
// and never below AgeFloor; 1 without levels.
func (h *HetPollux) AgeWeight(age float64) float64 {
	return levelWeight(age, h.AgeLevel, h.AgeDecay, h.AgeFloor)
}

// remaining is the job's estimated remaining time, in seconds, at its
// pace so far: with Progress f > 0, Age * (1 - f) / f; false when the
// job reports no progress.
func remaining(job *Job) (float64, bool) {
	if !(job.Progress > 0) {
		return 0, false
	}
	return job.Age * (1 - job.Progress) / job.Progress, true
}

// jobWeight is the weight of the job's power-mean term: its
// remaining-time weight (RemainLevel) if it reports its progress, else
// its age weight.
func (h *HetPollux) jobWeight(job *Job, remain float64, hasRemain bool) float64 {
	if hasRemain && h.RemainLevel > 0 {
		return levelWeight(remain, h.RemainLevel, h.RemainDecay, h.RemainFloor)
	}
	return h.AgeWeight(job.Age)
}

// levelWeight is the weight of x (seconds) on levels: 1 in the first
// level (level seconds), then 2^(-decay) per level, each level twice as
// long as the previous one, never below floor; 1 without levels.
func levelWeight(x, level, decay, floor float64) float64 {
	if !(level > 0) || !(x > 0) {
		return 1
	}
	l := math.Floor(math.Log2(1 + x/level))
	return math.Max(math.Pow(2, -decay*l), floor)
}

// placeType places the jobs that want type t: those whose type and count
// did not change keep their nodes; the others, largest first, take whole
// free nodes, then the node whose free GPUs fit the rest most tightly,
// then the nodes with the most free GPUs. On a cluster of several racks a
// job is packed into the rack that fits it most tightly, and spread over
// racks only when none has room (never, for a required topology: it then
// waits).
func placeType(snap *Snapshot, tp *topo, ti typeInfo, t int, want []hetOption, out []Placement) {
	multi := tp.racks() > 1
	free := map[int]int{}
	for _, n := range ti.nodes {
		free[n] = snap.Nodes[n].GPUs
	}
	var moving []int
	for j, w := range want {
		if w.typ != t {
			continue
		}
		cur := normalize(snap.Jobs[j].Current)
		keep := cur.Replicas() == w.k && snap.TypeOf(cur) == ti.name
		if multi {
			keep = keep && !violates(snap, tp, j, cur)
		}
		for _, nc := range cur {
			keep = keep && free[nc.Node] >= nc.Count
		}
		if !keep {
			moving = append(moving, j)
			continue
		}
		for _, nc := range cur {
			free[nc.Node] -= nc.Count
		}
		out[j] = slices.Clone(cur)
	}
	sort.SliceStable(moving, func(a, b int) bool { return want[moving[a]].k > want[moving[b]].k })
	for _, j := range moving {
		if multi {
			out[j] = packRacks(snap, tp, j, ti.nodes, free, ti.gpusPerNode, want[j].k)
			continue
		}
		out[j] = packCompact(ti.nodes, free, ti.gpusPerNode, want[j].k)
	}
}

// packRacks is packCompact on a cluster of several racks for job j: within
// the rack whose free GPUs fit k most tightly (for a required topology,
// the domain of its level), else, unless the topology is required, over
// all the nodes (nil when the job must wait).
func packRacks(snap *Snapshot, tp *topo, j int, nodes []int, free map[int]int, per, k int) Placement {
	l := 0
	req := tp.level(snap.Jobs[j].Topology.Required)
	if req >= 0 {
		l = req
	}
	dom := tp.domain[l]
	sum := map[int32]int{}
	for _, n := range nodes {
		sum[dom[n]] += free[n]
	}
	best := int32(-1)
	for _, n := range nodes {
		if f := sum[dom[n]]; f >= k && (best < 0 || f < sum[best]) {
			best = dom[n]
		}
	}
	if best >= 0 {
		var in []int
		for _, n := range nodes {
			if dom[n] == best {
				in = append(in, n)
			}
		}
		return packCompact(in, free, per, k)
	}
	if req >= 0 {
		return nil
	}
	return packCompact(nodes, free, per, k)
}

// packCompact takes k GPUs from the nodes (in order) with free GPUs,
// updating free: whole free nodes while k is at least a node, then the
// tightest single node for the rest, else the nodes with the most free.
func packCompact(nodes []int, free map[int]int, per, k int) Placement {
	var pl Placement
	for k >= per {
		n := slices.IndexFunc(nodes, func(n int) bool { return free[n] == per })
		if n < 0 {
			break
		}
		pl = append(pl, NodeCount{Node: nodes[n], Count: per})
		free[nodes[n]] = 0
		k -= per
	}
	for k > 0 {
		best := -1
		for _, n := range nodes {
			if free[n] >= k && (best < 0 || free[n] < free[best]) {
				best = n
			}
		}
		if best >= 0 {
			pl = append(pl, NodeCount{Node: best, Count: k})
			free[best] -= k
			break
		}
		for _, n := range nodes {
			if free[n] > 0 && (best < 0 || free[n] > free[best]) {
				best = n
			}
		}
		if best < 0 {
			break // cannot happen: the knapsack respects the type's GPUs
		}
		c := free[best]
		pl = append(pl, NodeCount{Node: best, Count: c})
		free[best] = 0
		k -= c
	}
	return normalize(pl)
}
