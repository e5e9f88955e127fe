package optimizer

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"pollux/optimizer/goodput"
)

// Sia defaults (the artifact's simulator_config.py and run_experiment.sh).
const (
	// SiaPowerMean is Sia's fairness exponent p.
	SiaPowerMean = -0.5
	// SiaLambdaN is Sia's penalty for leaving a job without GPUs.
	SiaLambdaN = 1.1
	// siaZeroGain is the normalised goodput of a configuration a job
	// cannot use (Sia's ZERO_ALLOC_GAIN).
	siaZeroGain = 1e-4
	// siaClip caps a powered goodput (Sia's sia_goodput_clip_val).
	siaClip = 3000.0
	// siaMaxGPUs is the largest configuration Sia considers.
	siaMaxGPUs = 64
)

// siaRestartPenalty is the restart cost, in seconds, that Sia's policy
// assumes per application in its reallocation factor (sia.py); the
// simulator's true delays differ (its applications.py).
var siaRestartPenalty = map[string]float64{
	"deepspeech2": 25, "imagenet": 250, "cifar10": 30, "bert": 120, "yolov3": 45,
}

// Sia is the scheduling policy of Sia (Jayaram Subramanya et al., SOSP
// 2023) as its artifact's simulator runs it, for clusters of several GPU
// types: one configuration (type, nodes, GPUs from a fixed table) per job,
// chosen by an integer program over normalised, penalised goodputs and
// solved exactly while small. docs/policies.md describes it in full.
type Sia struct {
	// PowerMean is p; LambdaN the no-allocation penalty.
	PowerMean, LambdaN float64
	// ProfiledNodes caps a configuration's nodes per GPU type (the
	// artifact's configurations span at most the nodes its traces were
	// measured on); absent or 0: no cap.
	ProfiledNodes map[string]int
	// ExactStates bounds the exact solver (0: the default).
	ExactStates int
	// Cache, if set, memoises goodputs from round to round (it never
	// changes results, only their cost).
	Cache *GoodputCache
	// RandomTies breaks ties between equally costed configurations of
	// different GPU types by a random order of the types, drawn per job
	// and round from the snapshot's seed (the artifact's MILP solver
	// breaks them by its own path); else the type order of the snapshot
	// decides.
	RandomTies bool
}

// NewSia returns Sia with the artifact's defaults.
func NewSia() *Sia {
	return &Sia{PowerMean: SiaPowerMean, LambdaN: SiaLambdaN, Cache: &GoodputCache{}}
}

// Name implements Policy.
func (s *Sia) Name() string { return "sia" }

// GPUTypeAware implements TypeAware.
func (s *Sia) GPUTypeAware() {}

// siaConfig is one row of Sia's configuration table.
type siaConfig struct {
	typ         int
	nodes, gpus int
	typeName    string
}

// typeInfo describes one GPU type of a round.
type typeInfo struct {
	name        string
	gpusPerNode int
	nodes       []int // node indexes, in snapshot order
	total       int   // GPUs of the type
}

// roundTypes lists the snapshot's GPU types in order of appearance.
func roundTypes(snap *Snapshot) []typeInfo {
	var out []typeInfo
	index := map[string]int{}
	for n, node := range snap.Nodes {
		i, ok := index[node.Type]
		if !ok {
			i = len(out)
			index[node.Type] = i
			out = append(out, typeInfo{name: node.Type})
		}
		out[i].nodes = append(out[i].nodes, n)
		out[i].total += node.GPUs
		out[i].gpusPerNode = max(out[i].gpusPerNode, node.GPUs)
	}
	return out
}

// siaConfigs is Sia's configuration table for one type: 1, 2, 4 ... GPUs
// below a node, then whole nodes up to siaMaxGPUs, at most maxNodes nodes.
func siaConfigs(t int, ti typeInfo, maxNodes int) []siaConfig {
	var out []siaConfig
	g := ti.gpusPerNode
	for k := 1; k < g; k *= 2 {
		out = append(out, siaConfig{typ: t, nodes: 1, gpus: k})
	}
	for n := 1; n*g <= siaMaxGPUs && n <= maxNodes; n++ {
		out = append(out, siaConfig{typ: t, nodes: n, gpus: n * g})
	}
	for i := range out {
		out[i].typeName = ti.name
	}
	return out
}

// Allocate implements Policy.
func (s *Sia) Allocate(snap *Snapshot, _ *State) (Result, error) {
	if snap == nil {
		return Result{}, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	tp, err := check(snap)
	if err != nil {
		return Result{}, err
	}
	if s.PowerMean >= 0 || math.IsNaN(s.PowerMean) {
		return Result{}, fmt.Errorf("%w: Sia needs a negative power-mean exponent, got %v", ErrBadSnapshot, s.PowerMean)
	}
	types := roundTypes(snap)
	var configs []siaConfig
	caps := make([]int, len(types))
	for t, ti := range types {
		maxNodes := len(ti.nodes)
		if p := s.ProfiledNodes[ti.name]; p > 0 {
			maxNodes = min(maxNodes, p)
		}
		configs = append(configs, siaConfigs(t, ti, maxNodes)...)
		caps[t] = ti.total
	}
	items := make([]choiceItem, len(snap.Jobs))
	for j := range snap.Jobs {
		items[j] = s.jobItem(snap, &snap.Jobs[j], types, configs)
		capRequired(snap, tp, types, j, &items[j])
	}
	s.Cache.Sweep()
	exact := s.ExactStates
	if exact <= 0 {
		exact = defaultExactStates
	}
	sol := solveChoices(items, caps, exact)
	res := Result{
		Placements: make([]Placement, len(snap.Jobs)),
		Layouts:    make([][]int, len(snap.Jobs)),
		Diagnostics: Diagnostics{
			Objective: sol.cost / 100,
			Bound:     sol.bound / 100,
			Exact:     sol.exact,
		},
	}
	// Place each type's jobs.
	for t, ti := range types {
		var jobs []int
		for j, p := range sol.pick {
			if p >= 0 && items[j].opts[p].typ == t {
				jobs = append(jobs, j)
			}
		}
		sort.SliceStable(jobs, func(a, b int) bool {
			return items[jobs[a]].opts[sol.pick[jobs[a]]].size > items[jobs[b]].opts[sol.pick[jobs[b]]].size
		})
		free := make([]int, len(ti.nodes))
		for i, n := range ti.nodes {
			free[i] = snap.Nodes[n].GPUs
		}
		cursor := 0
		for _, j := range jobs {
			k := items[j].opts[sol.pick[j]].size
			visits := packFast(free, ti.gpusPerNode, &cursor, k)
			res.Placements[j], res.Layouts[j] = visitsToPlacement(visits, ti.nodes)
		}
	}
	holdViolations(snap, tp, &res)
	return res, nil
}

// jobItem builds the choices of one job: one option per valid
// configuration, costed in hundredths (Sia rounds to two decimals).
func (s *Sia) jobItem(snap *Snapshot, job *Job, types []typeInfo, configs []siaConfig) choiceItem {
	goodputs := make([]float64, len(configs))
	for i := range goodputs {
		goodputs[i] = siaZeroGain
	}
	maxRep := max(job.MaxReplicas, 1)
	// A model per type, the user's batch bounding the batch search.
	models := make([]*goodput.Model, len(types))
	src := -1
	for t, ti := range types {
		if md := job.TypeModels[ti.name]; md != nil {
			m := *md
			if job.Batch >= m.Limits.InitBatch && job.Batch < m.Limits.MaxBatch {
				m.Limits.MaxBatch = job.Batch
			}
			if m.Validate() == nil {
				models[t] = &m
				if src < 0 {
					src = t
				}
			}
		}
	}
	noModel := make([]bool, len(types))
	for i, c := range configs {
		if c.gpus > maxRep {
			continue
		}
		switch {
		case models[c.typ] != nil:
			goodputs[i] = s.Cache.goodputAt(*models[c.typ], c.nodes, c.gpus)
		case src >= 0:
			// Project the first modelled type's goodput by the ratio of
			// the one-GPU throughputs.
			sn := ceilDiv(c.gpus, types[src].gpusPerNode)
			ratio := 1.0
			if a, b := job.TypeThroughput[c.typeName], job.TypeThroughput[types[src].name]; a > 0 && b > 0 {
				ratio = a / b
			}
			goodputs[i] = s.Cache.goodputAt(*models[src], sn, c.gpus) * ratio
		default:
			noModel[c.typ] = true
		}
	}
	// Normalise by the smallest usable goodput over modelled types.
	minG := math.Inf(1)
	for i, c := range configs {
		if !noModel[c.typ] && goodputs[i] > siaZeroGain && c.gpus <= maxRep {
			minG = math.Min(minG, goodputs[i])
		}
	}
	if math.IsInf(minG, 1) {
		minG = 1
	}
	for i, c := range configs {
		goodputs[i] /= minG
		if noModel[c.typ] {
			goodputs[i] = siaZeroGain
			if c.gpus == 1 {
				goodputs[i] = 1
			}
		}
		if goodputs[i] <= siaZeroGain {
			goodputs[i] = siaZeroGain
		}
	}
	// The reallocation factor spares the current configuration.
	penalty := 30.0
	if p, ok := siaRestartPenalty[job.App]; ok {
		penalty = p
	}
	factor := 1.0
	if job.Age >= penalty {
		factor = math.Max(job.Age-float64(job.Restarts)*penalty, 0) / (job.Age + penalty)
	}
	cur := -1
	if k := job.Current.Replicas(); k > 0 {
		typ := snap.TypeOf(job.Current)
		cur = slices.IndexFunc(configs, func(c siaConfig) bool { return c.typeName == typ && c.gpus == k })
	}
	it := choiceItem{none: math.Round(100 * s.LambdaN), forced: -1}
	for _, i := range s.configOrder(snap, job, len(types), configs) {
		c := configs[i]
		if c.gpus > maxRep || c.gpus < job.MinReplicas || job.GPUType != "" && c.typeName != job.GPUType {
			continue
		}
		g := goodputs[i]
		if cur >= 0 && i != cur {
			g *= factor
		}
		a := math.Min(math.Pow(g, s.PowerMean), siaClip)
		if math.IsNaN(a) || math.IsInf(a, 0) {
			a = siaClip
		}
		cost := math.RoundToEven(100 * a)
		it.opts = append(it.opts, option{typ: c.typ, size: c.gpus, cost: cost, tag: i})
		if i == cur && job.Restarting {
			it.forced = len(it.opts) - 1
		}
	}
	return it
}

// configOrder is the order in which the job's configurations become
// options, the first of equally costed ones winning: the table's, or with
// RandomTies the table's within each type and the types in a random order
// drawn from the round's seed and the job's ID.
func (s *Sia) configOrder(snap *Snapshot, job *Job, ntypes int, configs []siaConfig) []int {
	out := make([]int, 0, len(configs))
	if !s.RandomTies || ntypes < 2 {
		for i := range configs {
			out = append(out, i)
		}
		return out
	}
	h := fnv.New64a()
	h.Write([]byte(job.ID))
	perm := rand.New(rand.NewPCG(snap.Seed, h.Sum64())).Perm(ntypes)
	for _, t := range perm {
		for i, c := range configs {
			if c.typ == t {
				out = append(out, i)
			}
		}
	}
	return out
}

// bestGoodput is a model's best goodput on k replicas over n nodes, 0 when
// no batch configuration is feasible.
func bestGoodput(md goodput.Model, n, k int) float64 {
	cfg, err := md.Optimize(n, k)
	if err != nil {
		return 0
	}
	return cfg.Goodput
}

// packFast is the artifact's fast placement of one job of k GPUs on a
// type's nodes of per GPUs: first whole free nodes, then any free GPUs,
// scanning from the cursor (which moves on for the next job) and wrapping
// around. It returns the type-local node of every GPU taken, in order.
func packFast(free []int, per int, cursor *int, k int) []int {
	n := len(free)
	node := *cursor
	var out []int
	if per > 0 {
		whole := k / per
		for checked := 0; checked < n && whole > 0; checked++ {
			if free[node] == per {
				free[node] = 0
				k -= per
				for i := 0; i < per; i++ {
					out = append(out, node)
				}
				whole--
			}
			node = (node + 1) % n
		}
	}
	for guard := 0; k > 0 && guard < 2*n; guard++ {
		if free[node] > 0 {
			c := min(k, free[node])
			k -= c
			free[node] -= c
			for i := 0; i < c; i++ {
				out = append(out, node)
			}
		}
		node = (node + 1) % n
	}
	*cursor = node
	return out
}

// visitsToPlacement turns the type-local node of every GPU, in the order
// taken, into a placement (global node indexes) and the artifact's
// placement tuple: the counts of consecutive runs of the same node.
func visitsToPlacement(visits []int, nodes []int) (Placement, []int) {
	var layout []int
	var pl Placement
	for i, v := range visits {
		if i == 0 || v != visits[i-1] {
			layout = append(layout, 1)
			pl = append(pl, NodeCount{Node: nodes[v], Count: 1})
		} else {
			layout[len(layout)-1]++
			pl[len(pl)-1].Count++
		}
	}
	return normalize(pl), layout
}
