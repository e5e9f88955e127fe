package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
	"pollux/testbed"
	"pollux/testbed/clusterspec"
	"pollux/testbed/workload"
)

// Config is the simulated cluster and run.
type Config struct {
	// Nodes and GPUsPerNode shape a cluster of one (untyped) GPU type.
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpus_per_node"`
	// Cluster, when not empty, replaces Nodes and GPUsPerNode: groups of
	// nodes, one GPU type each, in the cluster's type order.
	Cluster []clusterspec.Group `json:"cluster,omitempty"`
	// Semantics selects the Pollux artifact's testbed or Sia's simulator
	// where they differ.
	Semantics Semantics `json:"semantics"`
	// MaxReplicas caps every job's GPU count (0: no cap beyond the
	// policy's own).
	MaxReplicas int `json:"max_replicas,omitempty"`
	// Interval is the scheduling interval in seconds.
	Interval float64 `json:"interval"`
	// Restart is what every (re)allocation costs a job, in seconds.
	Restart float64 `json:"restart"`
	// Interference is the fraction by which a distributed job slows down
	// while it shares a node with another distributed job (0 disables).
	Interference float64 `json:"interference"`
	// Seed drives every random choice of the policy.
	Seed uint64 `json:"seed"`
	// Horizon is the simulated time after which Run gives up.
	Horizon float64 `json:"horizon"`
	// NoFairness skips finish-time fairness (under Sia's semantics it runs
	// every job alone on its share of every GPU type).
	NoFairness bool `json:"no_fairness,omitempty"`
	// Racks puts the nodes, in order, into this many racks of consecutive
	// nodes (as even as the node count allows; 0 and 1: one rack).
	Racks int `json:"racks,omitempty"`
	// Oversubscription and NodeBandwidth (bytes/s) are the network across
	// racks (package fabric; 0: 1 and fabric.DefaultNodeBandwidth). The
	// traces measure only placements within a rack; with several racks,
	// what a placement across racks pays on top of them comes from this
	// network and the jobs' gradient sizes, and changes with the other
	// jobs crossing the same uplinks. No policy is told any of it.
	Oversubscription float64 `json:"oversubscription,omitempty"`
	NodeBandwidth    float64 `json:"node_bandwidth,omitempty"`
	// GradientBytes gives the gradient size of applications the network
	// does not know (fabric.GradientBytes knows the artifact's).
	GradientBytes map[string]float64 `json:"gradient_bytes,omitempty"`
	// RackBlind hides the racks from the policy and the jobs, as the
	// scheduler was before topology: the snapshot has no topology, and
	// jobs fit their models as if every placement were within one rack
	// (they still run at the true, cross-rack speed).
	RackBlind bool `json:"rack_blind,omitempty"`
	// Cloud, when set, makes the cluster elastic (Nodes is then unused):
	// see Cloud. Finish-time fairness is not computed.
	Cloud *Cloud `json:"cloud,omitempty"`
	// isolated marks the runs finish-time fairness makes of one job alone
	// (they compute no fairness themselves).
	isolated bool
}

// groups is the cluster's node groups.
func (c Config) groups() []clusterspec.Group {
	if len(c.Cluster) > 0 {
		return c.Cluster
	}
	return []clusterspec.Group{{Nodes: c.Nodes, GPUsPerNode: c.GPUsPerNode}}
}

// TotalGPUs is the GPUs of the cluster.
func (c Config) TotalGPUs() int {
	g := 0
	for _, gr := range c.groups() {
		g += gr.Nodes * gr.GPUsPerNode
	}
	return g
}

// cloudGroups are the groups an elastic cluster may reach, to validate:
// untyped, MaxNodes nodes (with the Pollux artifact's semantics and one
// rack); of several types, the fixed groups and at most the nodes left
// for the one of Cloud.GPUType (one rack).
func (c Config) cloudGroups() ([]clusterspec.Group, error) {
	if c.Racks > 1 {
		return nil, fmt.Errorf("%w: an elastic (cloud) cluster has one rack", ErrBadConfig)
	}
	if len(c.Cluster) == 0 {
		if c.Semantics != PolluxSemantics || c.Cloud.GPUType != "" {
			return nil, fmt.Errorf("%w: an untyped elastic (cloud) cluster follows the Pollux artifact's semantics and adds untyped nodes (a GPU type needs Config.Cluster)", ErrBadConfig)
		}
		return []clusterspec.Group{{Nodes: c.Cloud.MaxNodes, GPUsPerNode: c.GPUsPerNode}}, nil
	}
	fixed, found := 0, false
	for _, g := range c.Cluster {
		if g.Type == c.Cloud.GPUType {
			found = true
		} else {
			fixed += g.Nodes
		}
	}
	switch {
	case !found:
		return nil, fmt.Errorf("%w: the elastic cluster adds nodes of GPU type %q, which is not one of the cluster's", ErrBadConfig, c.Cloud.GPUType)
	case fixed > c.Cloud.MaxNodes || fixed > c.Cloud.InitialNodes:
		return nil, fmt.Errorf("%w: %d nodes of the other GPU types are always there: more than the maximum of %d or the %d initial nodes", ErrBadConfig, fixed, c.Cloud.MaxNodes, c.Cloud.InitialNodes)
	}
	groups := slices.Clone(c.Cluster)
	for i := range groups {
		if groups[i].Type == c.Cloud.GPUType {
			groups[i].Nodes = max(c.Cloud.MaxNodes-fixed, 1)
		}
	}
	return groups, nil
}

// DefaultConfig is the reference testbed: 16 nodes of 4 GPUs, a 60 s
// interval, 30 s restarts, no interference.
func DefaultConfig() Config {
	return Config{Nodes: 16, GPUsPerNode: 4, Interval: 60, Restart: 30, Horizon: 60 * 24 * 3600}
}

// Validate reports whether the configuration can be simulated.
func (c Config) Validate() error {
	nodes := 0
	seen := map[string]bool{}
	groups := c.groups()
	var err error
	if c.Cloud != nil {
		if err := c.Cloud.Validate(); err != nil {
			return err
		}
		if groups, err = c.cloudGroups(); err != nil {
			return err
		}
	}
	for _, g := range groups {
		switch {
		case g.Nodes < 1 || g.Nodes > 1<<16:
			return fmt.Errorf("%w: %d nodes of GPU type %q, want 1..65536", ErrBadConfig, g.Nodes, g.Type)
		case g.GPUsPerNode < 1 || g.GPUsPerNode > 64:
			return fmt.Errorf("%w: %d GPUs per node of GPU type %q, want 1..64", ErrBadConfig, g.GPUsPerNode, g.Type)
		case seen[g.Type]:
			return fmt.Errorf("%w: GPU type %q listed twice", ErrBadConfig, g.Type)
		}
		seen[g.Type] = true
		nodes += g.Nodes
	}
	switch {
	case nodes > 1<<16:
		return fmt.Errorf("%w: %d nodes, want at most 65536", ErrBadConfig, nodes)
	case c.Racks < 0 || c.Racks > nodes:
		return fmt.Errorf("%w: %d racks for %d nodes, want 1..%d", ErrBadConfig, c.Racks, nodes, nodes)
	case c.Oversubscription != 0 && !(c.Oversubscription >= 1) || math.IsInf(c.Oversubscription, 0):
		return fmt.Errorf("%w: oversubscription %v, want a finite ratio >= 1", ErrBadConfig, c.Oversubscription)
	case c.NodeBandwidth != 0 && !(c.NodeBandwidth > 0) || math.IsInf(c.NodeBandwidth, 0):
		return fmt.Errorf("%w: node bandwidth %v bytes/s, want a finite positive rate", ErrBadConfig, c.NodeBandwidth)
	case c.MaxReplicas < 0:
		return fmt.Errorf("%w: max replicas %d", ErrBadConfig, c.MaxReplicas)
	case !(c.Interval >= 1) || c.Interval != math.Trunc(c.Interval) || c.Interval > 86400:
		return fmt.Errorf("%w: interval %v s, want a whole number of seconds in [1, 86400]", ErrBadConfig, c.Interval)
	case !(c.Restart >= 0) || math.IsInf(c.Restart, 0):
		return fmt.Errorf("%w: restart %v s", ErrBadConfig, c.Restart)
	case !(c.Interference >= 0 && c.Interference <= 1):
		return fmt.Errorf("%w: interference %v outside [0, 1]", ErrBadConfig, c.Interference)
	case !(c.Horizon > 0):
		return fmt.Errorf("%w: horizon %v s", ErrBadConfig, c.Horizon)
	}
	return nil
}

// ProgressFunc is called after every round with the simulated time and how
// many jobs have completed out of the total.
type ProgressFunc func(now float64, done, total int)

// JobResult is one job's outcome.
type JobResult struct {
	Name       string  `json:"name"`
	App        string  `json:"application"`
	Submit     float64 `json:"submit_time"`
	Completion float64 `json:"completion_time"`
	JCT        float64 `json:"jct"`
	Restarts   int     `json:"restarts"`
	GPUSeconds float64 `json:"gpu_seconds"`
	// AllocatedGPUSeconds is the GPUs the job held times the interval,
	// summed over rounds.
	AllocatedGPUSeconds float64 `json:"allocated_gpu_seconds"`
	// CrossRackGPUSeconds is the part of AllocatedGPUSeconds on
	// placements across racks.
	CrossRackGPUSeconds float64 `json:"cross_rack_gpu_seconds,omitempty"`
	// GPUType is the GPU type the job finished on ("" on a single-type
	// cluster).
	GPUType string `json:"gpu_type,omitempty"`
	// FTF is the finish-time fairness ratio: JCT over the time the job
	// would take alone on an equal share of the cluster.
	FTF float64 `json:"ftf"`
	// Fits counts the job's throughput-model refits.
	Fits int `json:"fits"`
	// FittedCrossRack is the cross-rack term of the job's last model
	// (goodput.Params.AlphaX: seconds a synchronisation across two racks
	// adds; 0 when it never measured a placement across racks it knew
	// of). TrueCrossRack is what the network across racks added to its
	// synchronised steps, per goodput.RackShare, averaged over the time
	// it trained across racks: the value a perfect fit would approach.
	FittedCrossRack float64 `json:"fitted_cross_rack_s,omitempty"`
	TrueCrossRack   float64 `json:"true_cross_rack_s,omitempty"`
}

// Sample is the cluster at the end of one round.
type Sample struct {
	Time float64 `json:"time"`
	// GPUs is how many GPUs are allocated.
	GPUs int `json:"gpus"`
	// Active is how many jobs are submitted and not complete.
	Active int `json:"active"`
	// MeanBatch is the mean total batch size of the jobs holding GPUs (0
	// when none does).
	MeanBatch float64 `json:"mean_batch"`
	// Nodes is, on an elastic cluster, the nodes paid for (joined and
	// booting) once the round's resize is done.
	Nodes int `json:"nodes,omitempty"`
	// Efficiency is, on an elastic cluster, the mean statistical
	// efficiency of the jobs holding GPUs at their current batch (0 when
	// none does).
	Efficiency float64 `json:"efficiency,omitempty"`
}

// Result is one simulated run.
type Result struct {
	Policy   string      `json:"policy"`
	Workload string      `json:"workload"`
	Jobs     []JobResult `json:"jobs"`
	Timeline []Sample    `json:"timeline"`
	Rounds   int         `json:"rounds"`
	Metrics  Metrics     `json:"metrics"`
	// Cloud is what the elastic cluster cost (nil for a fixed cluster).
	Cloud *CloudResult `json:"cloud,omitempty"`
}

// Run replays wl on the cluster of cfg under pol, with jobs in mode (see
// ModeFor), every application's traces from cat (one GPU type). The
// policy's search state is carried from round to round. progress may be
// nil.
func Run(ctx context.Context, cfg Config, cat testbed.Catalog, wl workload.Workload, pol optimizer.Policy, mode Mode, progress ProgressFunc) (*Result, error) {
	types := testbed.TypedCatalog{}
	for _, g := range cfg.groups() {
		types[g.Type] = cat
	}
	return RunTyped(ctx, cfg, types, wl, pol, mode, progress)
}

// RunTyped is Run on a cluster of several GPU types: cats maps each type
// of cfg's cluster to its applications.
func RunTyped(ctx context.Context, cfg Config, cats testbed.TypedCatalog, wl workload.Workload, pol optimizer.Policy, mode Mode, progress ProgressFunc) (*Result, error) {
	st, err := NewStepper(cfg, cats, wl, pol, mode)
	if err != nil {
		return nil, err
	}
	for !st.Done() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := st.Advance(); err != nil {
			return nil, err
		}
		if err := st.Allocate(); err != nil {
			return nil, err
		}
		if progress != nil {
			progress(st.Now(), st.Completed(), len(st.s.jobs))
		}
	}
	return st.Finish(ctx)
}

// newState checks a run's inputs and builds its jobs and nodes.
func newState(cfg Config, cats testbed.TypedCatalog, wl workload.Workload, pol optimizer.Policy, mode Mode) (*state, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(wl.Jobs) == 0 {
		return nil, fmt.Errorf("%w: workload %q has no jobs", ErrBadConfig, wl.Name)
	}
	groups := cfg.groups()
	for _, g := range groups {
		if cats[g.Type] == nil {
			return nil, fmt.Errorf("%w: no traces for GPU type %q", ErrUnknownApp, g.Type)
		}
	}
	s := &state{cfg: cfg, pol: pol, mode: mode, steps: map[stepKey][]float64{}, cats: cats}
	cache := &fitCache{models: map[string]goodput.Params{}}
	for i, spec := range wl.Jobs {
		apps := map[string]testbed.Application{}
		for _, g := range groups {
			app, ok := cats[g.Type][spec.App]
			if !ok {
				if g.Type == "" {
					return nil, fmt.Errorf("%w: job %q names %q", ErrUnknownApp, spec.Name, spec.App)
				}
				return nil, fmt.Errorf("%w: job %q names %q, which has no traces for GPU type %q", ErrUnknownApp, spec.Name, spec.App, g.Type)
			}
			apps[g.Type] = app
		}
		j := newJob(i, spec, apps, groups[0].Type, mode, cfg.Semantics, cache)
		s.jobs = append(s.jobs, j)
	}
	sort.SliceStable(s.jobs, func(a, b int) bool { return s.jobs[a].spec.Time < s.jobs[b].spec.Time })
	total := 0
	for _, g := range groups {
		total += g.Nodes
	}
	fixed := groups
	if cfg.Cloud != nil {
		s.newCloud()
		fixed = nil
	}
	for _, g := range fixed {
		for i := 0; i < g.Nodes; i++ {
			id := "node-" + strconv.Itoa(len(s.nodes))
			if g.Type != "" {
				id = g.Type + "-" + strconv.Itoa(i)
			}
			rack := len(s.nodes) * max(cfg.Racks, 1) / total
			s.rackOf = append(s.rackOf, rack)
			node := optimizer.Node{ID: id, GPUs: g.GPUsPerNode, Type: g.Type}
			if cfg.Racks > 1 && !cfg.RackBlind {
				node.Topology = []string{"rack-" + strconv.Itoa(rack)}
			}
			s.nodes = append(s.nodes, node)
		}
	}
	for _, j := range s.jobs {
		j.rackAware = cfg.Racks > 1 && !cfg.RackBlind
	}
	var err error
	if s.links, err = newLinks(cfg, s.rackOf, s.jobs); err != nil {
		return nil, err
	}
	return s, nil
}

// stepKey names a cached Optimus step-time table.
type stepKey struct {
	app   string
	batch int
}

type state struct {
	cfg   Config
	cats  testbed.TypedCatalog
	pol   optimizer.Policy
	mode  Mode
	jobs  []*job
	nodes []optimizer.Node
	// rackOf is every node's rack; links the network across them (nil
	// for one rack).
	rackOf []int
	links  *links
	now    float64
	round  uint64
	prev   *optimizer.State
	steps  map[stepKey][]float64
	// vacating is, per node index, how long the workers that held the
	// node until this round take to leave it (see Stepper.SetNodes).
	vacating map[int]float64
	// cloud is the elastic cluster's bookkeeping (nil for a fixed one);
	// scale is the size the policy asked for in the last round.
	cloud *cloudState
	scale *optimizer.ScaleDecision
}

// advance moves every job forward by one interval.
func (s *state) advance() error {
	var slow map[int]bool
	if s.cfg.Interference > 0 {
		slow = s.interfering()
	}
	if s.links != nil {
		if err := s.advanceLinked(slow); err != nil {
			return err
		}
	} else {
		for _, j := range s.jobs {
			j.advance(s.now, s.cfg.Interval, s.interference(slow, j))
		}
	}
	s.now += s.cfg.Interval
	return nil
}

// interference is the slowdown of job j this interval (slow: the nodes
// hosting more than one distributed job).
func (s *state) interference(slow map[int]bool, j *job) float64 {
	if slow != nil && len(j.alloc) > 1 {
		for _, nc := range j.alloc {
			if slow[nc.Node] {
				return s.cfg.Interference
			}
		}
	}
	return 0
}

// interfering is the set of nodes hosting more than one distributed job.
func (s *state) interfering() map[int]bool {
	count := map[int]int{}
	for _, j := range s.jobs {
		if j.done || len(j.alloc) < 2 {
			continue
		}
		for _, nc := range j.alloc {
			count[nc.Node]++
		}
	}
	out := map[int]bool{}
	for n, c := range count {
		if c > 1 {
			out[n] = true
		}
	}
	return out
}

// active lists the submitted, unfinished jobs.
func (s *state) active() []*job {
	var out []*job
	for _, j := range s.jobs {
		if !j.done && j.spec.Time <= s.now {
			out = append(out, j)
		}
	}
	return out
}

// allocate runs one policy round and applies the changed allocations.
//
// The cluster size the policy asks for (Result.Scale, nil if none) is kept
// in s.scale. On an elastic cluster a round without active jobs still asks
// the policy, which may release nodes.
func (s *state) allocate() error {
	act := s.active()
	s.scale = nil
	if len(act) == 0 && s.cloud == nil {
		return nil
	}
	snap := &optimizer.Snapshot{Nodes: s.nodes, Now: s.now, Seed: splitmix(s.cfg.Seed ^ (s.round * 0x9e3779b97f4a7c15))}
	s.round++
	for _, j := range act {
		snap.Jobs = append(snap.Jobs, s.snapshotJob(j))
	}
	res, err := s.pol.Allocate(snap, s.prev)
	if err != nil {
		return fmt.Errorf("%w: %s at %v s: %w", ErrPolicy, s.pol.Name(), s.now, err)
	}
	s.scale = res.Scale
	if len(act) == 0 {
		return nil
	}
	if len(res.Placements) != len(act) {
		return fmt.Errorf("%w: %s returned %d placements for %d jobs", ErrPolicy, s.pol.Name(), len(res.Placements), len(act))
	}
	used := make([]int, len(s.nodes))
	next := make([]optimizer.Placement, len(act))
	for i, pl := range res.Placements {
		next[i] = normalize(pl)
		for _, nc := range next[i] {
			if nc.Node < 0 || nc.Node >= len(s.nodes) || nc.Count < 0 {
				return fmt.Errorf("%w: %s placed job %q on node %d", ErrPolicy, s.pol.Name(), act[i].spec.Name, nc.Node)
			}
			if t := s.nodes[nc.Node].Type; t != s.nodes[next[i][0].Node].Type {
				return fmt.Errorf("%w: %s placed job %q on GPU types %q and %q (a job runs on one type)", ErrPolicy, s.pol.Name(), act[i].spec.Name, s.nodes[next[i][0].Node].Type, t)
			}
			used[nc.Node] += nc.Count
		}
	}
	for n, u := range used {
		if u > s.nodes[n].GPUs {
			return fmt.Errorf("%w: %s put %d replicas on node %d of %d GPUs", ErrPolicy, s.pol.Name(), u, n, s.nodes[n].GPUs)
		}
	}
	for i, j := range act {
		if next[i].Equal(j.alloc) && !j.evicted {
			continue
		}
		var layout []int
		if i < len(res.Layouts) && res.Layouts[i] != nil {
			layout = res.Layouts[i]
			if !sameCounts(layout, next[i]) {
				return fmt.Errorf("%w: %s gave job %q the layout %v for placement %v", ErrPolicy, s.pol.Name(), j.spec.Name, layout, next[i])
			}
		}
		typ := j.typ
		if len(next[i]) > 0 {
			typ = s.nodes[next[i][0].Node].Type
		}
		restart := s.cfg.restartDelay(j.spec.App)
		wait := 0.0
		for _, nc := range next[i] {
			wait = max(wait, s.vacating[nc.Node])
		}
		j.place(next[i], layout, typ, restart+wait, s.racks(next[i]))
	}
	for _, j := range act {
		j.contSum += float64(len(act))
		j.contN++
		j.allocated += float64(j.replicas) * s.cfg.Interval
		if j.racks > 1 {
			j.crossAllocated += float64(j.replicas) * s.cfg.Interval
		}
	}
	s.prev = res.State
	return nil
}

// racks is the number of racks placement pl spans.
func (s *state) racks(pl optimizer.Placement) int {
	r := 0
	for i, nc := range pl {
		seen := false
		for _, o := range pl[:i] {
			if s.rackOf[o.Node] == s.rackOf[nc.Node] {
				seen = true
				break
			}
		}
		if !seen {
			r++
		}
	}
	return r
}

// sameCounts reports whether layout holds exactly the counts of pl, in
// any order.
func sameCounts(layout []int, pl optimizer.Placement) bool {
	if len(layout) != len(pl) {
		return false
	}
	a := slices.Clone(layout)
	b := make([]int, len(pl))
	for i, nc := range pl {
		b[i] = nc.Count
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// normalize sorts a placement by node and merges duplicates and zeros.
func normalize(p optimizer.Placement) optimizer.Placement {
	if len(p) == 0 {
		return nil
	}
	q := append(optimizer.Placement(nil), p...)
	sort.Slice(q, func(a, b int) bool { return q[a].Node < q[b].Node })
	out := q[:0]
	for _, nc := range q {
		if nc.Count == 0 {
			continue
		}
		if len(out) > 0 && out[len(out)-1].Node == nc.Node {
			out[len(out)-1].Count += nc.Count
			continue
		}
		out = append(out, nc)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// maxReplicas is the most GPUs the policy may give a job.
func (s *state) maxReplicas(j *job) int {
	k := s.uncappedMaxReplicas(j)
	if s.cfg.MaxReplicas > 0 {
		k = min(k, s.cfg.MaxReplicas)
	}
	return k
}

func (s *state) uncappedMaxReplicas(j *job) int {
	l := j.limits
	byBatch := max(l.MaxBatch/l.MinLocal, 1)
	switch s.mode {
	case FixedAll:
		return j.spec.Replicas
	case FixedBatch:
		if _, ok := pinnedApps[j.spec.App]; ok {
			return 1
		}
		return max(j.batch/l.MinLocal, 1)
	}
	if j.pinned {
		return 1
	}
	grow := max(2*j.maxProfiledK(), 1)
	if s.mode == FixedLocal {
		return min(grow, 64, max(l.MaxBatch/j.local, 1))
	}
	if s.cfg.Semantics != SiaSemantics {
		return min(grow, 64, byBatch)
	}
	if s.mode == Merged {
		// Sia's artifact caps a heterogeneity-blind job at the smallest
		// GPU type's size (profiled nodes included), and its batch range
		// is the first type's.
		first := j.apps[s.cfg.groups()[0].Type].Limits()
		return min(grow, s.mergedCap(j), max(first.MaxBatch/first.MinLocal, 1))
	}
	// Sia's artifact shares the largest bound over the types.
	for _, a := range j.apps {
		la := a.Limits()
		byBatch = max(byBatch, la.MaxBatch/la.MinLocal)
	}
	return min(grow, 64, byBatch)
}

// mergedCap is the GPUs of the smallest GPU type, counting only the nodes
// it was profiled on.
func (s *state) mergedCap(j *job) int {
	c := math.MaxInt
	for _, g := range s.cfg.groups() {
		n := g.Nodes
		if p := j.physical[g.Type]; p > 0 {
			n = min(n, p)
		}
		c = min(c, n*g.GPUsPerNode)
	}
	return c
}

func (s *state) snapshotJob(j *job) optimizer.Job {
	sj := optimizer.Job{
		ID:          j.spec.Name,
		SubmitTime:  j.spec.Time,
		Age:         s.now - j.spec.Time,
		Attained:    j.attained,
		Restarts:    max(j.restarts, 0),
		Progress:    j.reportedProgress(),
		MinReplicas: 0,
		MaxReplicas: s.maxReplicas(j),
		Current:     j.alloc,
		App:         j.spec.App,
		Batch:       j.spec.Batch,
		Restarting:  j.running() && j.restartLeft > 0,
		MaxProfiled: j.maxProfiledK(),
	}
	if j.measuredRestart > 0 {
		sj.RestartDelay = j.measuredRestart
	}
	switch s.mode {
	case FixedAll:
		sj.Replicas = j.spec.Replicas
		sj.Executed = j.executed
	case FixedBatch:
		sj.Oracle = &oracle{s: s, j: j}
	case Merged:
		if p := j.profiles[mergedKey]; p != nil && p.params != nil {
			first := j.apps[s.cfg.groups()[0].Type].Limits()
			sj.Model = &goodput.Model{Params: *p.params, Grad: j.grad, Limits: first}
		}
	default:
		if p := j.profiles[j.typ]; p != nil && p.params != nil {
			sj.Model = &goodput.Model{Params: *p.params, Grad: j.grad, Limits: j.limits}
		}
		if len(s.cats) > 1 || s.cfg.Semantics == SiaSemantics {
			for t, p := range j.profiles {
				if p.params == nil {
					continue
				}
				if sj.TypeModels == nil {
					sj.TypeModels = map[string]*goodput.Model{}
					sj.TypeReplicas = map[string]int{}
				}
				sj.TypeModels[t] = &goodput.Model{Params: *p.params, Grad: j.grad, Limits: j.apps[t].Limits()}
				sj.TypeReplicas[t] = p.maxK
			}
		}
	}
	for t, a := range j.apps {
		if tp, ok := a.(testbed.TypeProfile); ok && tp.OneGPUThroughput() > 0 {
			if sj.TypeThroughput == nil {
				sj.TypeThroughput = map[string]float64{}
			}
			sj.TypeThroughput[t] = tp.OneGPUThroughput()
		}
	}
	return sj
}
