package optimizer

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"

	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
)

// Objective constants of pollux-spec.md section 4.
const (
	// RestartDelay is the seconds a reallocation costs a job (unless the
	// objective weighs measured delays and the job has one); it sets the
	// restart penalty of the objective.
	RestartDelay = 30.0
	// MaxJobNodes is the most nodes one job may span.
	MaxJobNodes = 16
	// DefaultPowerMean is the default fairness exponent p of the power mean.
	DefaultPowerMean = -1.0
	// meanEps is added to every scaled speedup before the power mean.
	meanEps = 1e-3
)

// Objective is the Pollux fitness of allocations of one snapshot: the
// power mean (exponent p) of every job's fair-share-scaled speedup, with
// the restart penalty for jobs whose placement changes. Build it once per
// round; Fitness is safe for concurrent use.
type Objective struct {
	snap *Snapshot
	p    float64
	// scale turns a speedup into node-equivalents: nodes / total GPUs.
	scale float64
	// kFair and nFair are the fair-share base configuration.
	kFair, nFair int
	speed        []speedFn
	// factor is each job's restart penalty multiplier.
	factor []float64
	// current is every job's normalised current placement.
	current []Placement
	// order lists job indexes by attained service, then submission time
	// (ties in snapshot order): the priority order of repair.
	order []int
	// capacity is the GPUs of every node.
	capacity []int
	// topo is the round's topology; multiRack reports more than one rack
	// (with one rack, every rack-aware step is skipped, so the search is
	// exactly the rack-blind one).
	topo      *topo
	multiRack bool
}

// speedFn is one job's speedup: a memoised goodput ratio, or K / K_fair for
// a job without a model.
type speedFn struct {
	s     *goodput.Speedup
	kFair float64
}

func (f speedFn) at(n, k int) float64 {
	if k <= 0 || n <= 0 {
		return 0
	}
	if f.s != nil {
		return f.s.At(n, k)
	}
	return float64(k) / f.kFair
}

// atRacks is the speedup across r racks (a job without a model has no
// communication cost to price).
func (f speedFn) atRacks(r, n, k int) float64 {
	if r > 1 && f.s != nil && k > 0 && n > 0 {
		return f.s.AtRacks(r, n, k)
	}
	return f.at(n, k)
}

// NewObjective checks snap and builds its objective with power-mean
// exponent p (use DefaultPowerMean for the paper's p = -1). Speedups are
// over the fair share, K_fair = ceil(GPUs / jobs) replicas on N_fair =
// ceil(nodes / GPUs) nodes (for a job with no feasible batch there, the
// largest feasible K below it), and priced across racks by the job's
// fitted cross-rack term (none fitted: racks are free).
func NewObjective(snap *Snapshot, p float64) (*Objective, error) {
	return newObjective(snap, p, nil, false)
}

// newObjective is NewObjective drawing speedup functions from cache (nil
// for none), and with measured, pricing a restart at the job's measured
// delay (Job.RestartDelay) where it has one.
func newObjective(snap *Snapshot, p float64, cache *SpeedupCache, measured bool) (*Objective, error) {
	if snap == nil {
		return nil, fmt.Errorf("%w: nil snapshot", ErrBadSnapshot)
	}
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return nil, fmt.Errorf("%w: power-mean exponent %v", ErrBadSnapshot, p)
	}
	tp, err := check(snap)
	if err != nil {
		return nil, err
	}
	total := snap.TotalGPUs()
	nJobs := len(snap.Jobs)
	o := &Objective{
		snap:     snap,
		p:        p,
		scale:    float64(len(snap.Nodes)) / float64(total),
		kFair:    1,
		nFair:    ceilDiv(len(snap.Nodes), total),
		speed:    make([]speedFn, nJobs),
		factor:   make([]float64, nJobs),
		current:  make([]Placement, nJobs),
		order:    make([]int, nJobs),
		capacity: make([]int, len(snap.Nodes)),
		topo:     tp,
	}
	o.multiRack = tp.racks() > 1
	if nJobs > 0 {
		o.kFair = ceilDiv(total, nJobs)
	}
	for i, n := range snap.Nodes {
		o.capacity[i] = n.GPUs
	}
	for j := range snap.Jobs {
		job := &snap.Jobs[j]
		o.current[j] = normalize(job.Current)
		o.order[j] = j
		o.factor[j] = restartFactor(job, measured)
		sf, err := cache.get(job, o.nFair, o.kFair)
		if err != nil {
			return nil, err
		}
		o.speed[j] = sf
	}
	sort.SliceStable(o.order, func(a, b int) bool {
		ja, jb := &snap.Jobs[o.order[a]], &snap.Jobs[o.order[b]]
		if ja.Attained != jb.Attained {
			return ja.Attained < jb.Attained
		}
		return ja.SubmitTime < jb.SubmitTime
	})
	return o, nil
}

// restartFactor is the multiplier of a job's speedup under a changed
// placement: max(age - restarts * delay, 0) / (age + delay), with delay
// RestartDelay, or with measured the job's measured restart delay if it
// has one.
func restartFactor(job *Job, measured bool) float64 {
	delay := RestartDelay
	if measured && job.RestartDelay > 0 {
		delay = job.RestartDelay
	}
	return math.Max(job.Age-float64(job.Restarts)*delay, 0) / (job.Age + delay)
}

// SpeedupCache keeps jobs' memoised speedup functions from one round to the
// next: a speedup depends only on the model and the fair-share base, so a
// job whose model and base did not change reuses its memo instead of
// recomputing it. Entries unused for a round are dropped. Safe for
// concurrent use; the zero value is ready.
type SpeedupCache struct {
	mu        sync.Mutex
	cur, prev map[speedKey]speedFn
}

type speedKey struct {
	model        goodput.Model
	nFair, kFair int
}

// get returns job's speedup function, from the cache when possible.
func (c *SpeedupCache) get(job *Job, nFair, kFair int) (speedFn, error) {
	if job.Model == nil {
		return newSpeedFn(job, nil, nFair, kFair)
	}
	md := *job.Model
	if c == nil {
		return newSpeedFn(job, &md, nFair, kFair)
	}
	key := speedKey{md, nFair, kFair}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.cur[key]; ok {
		return f, nil
	}
	f, ok := c.prev[key]
	if !ok {
		var err error
		if f, err = newSpeedFn(job, &md, nFair, kFair); err != nil {
			return speedFn{}, err
		}
	}
	if c.cur == nil {
		c.cur = make(map[speedKey]speedFn)
	}
	c.cur[key] = f
	return f, nil
}

// endRound forgets the entries the finished round did not use.
func (c *SpeedupCache) endRound() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, nil
}

// newSpeedFn builds job's speedup function from md (nil: the job has no
// model).
func newSpeedFn(job *Job, md *goodput.Model, nFair, kFair int) (speedFn, error) {
	if md == nil {
		return speedFn{kFair: float64(kFair)}, nil
	}
	var lastErr error
	for k := kFair; k >= max(nFair, 1); k-- {
		s, err := goodput.NewSpeedup(*md, nFair, k)
		if err == nil {
			return speedFn{s: s}, nil
		}
		if !errors.Is(err, goodput.ErrNoConfig) {
			return speedFn{}, fmt.Errorf("%w: job %q: %w", ErrBadModel, job.ID, err)
		}
		lastErr = err
	}
	return speedFn{}, fmt.Errorf("%w: job %q: %w", ErrBadModel, job.ID, lastErr)
}

// validate checks the structural invariants every policy relies on.
func validate(snap *Snapshot) error {
	_, err := check(snap)
	return err
}

// check is validate returning the snapshot's topology.
func check(snap *Snapshot) (*topo, error) {
	if err := checkJobsNodes(snap); err != nil {
		return nil, err
	}
	tp, err := buildTopo(snap)
	if err != nil {
		return nil, err
	}
	for n := range snap.Nodes {
		for _, d := range snap.Nodes[n].Topology {
			if d == "" {
				continue
			}
			if err := topology.CheckName("domain", d); err != nil {
				return nil, fmt.Errorf("%w: node %q: %w", ErrBadSnapshot, snap.Nodes[n].ID, err)
			}
		}
	}
	for j := range snap.Jobs {
		if err := snap.Jobs[j].Topology.Validate(snap.Levels); err != nil {
			return nil, fmt.Errorf("%w: job %q: %w", ErrBadSnapshot, snap.Jobs[j].ID, err)
		}
	}
	return tp, nil
}

// checkJobsNodes checks everything but the topology.
func checkJobsNodes(snap *Snapshot) error {
	if snap.TotalGPUs() <= 0 {
		return fmt.Errorf("%w: no GPUs", ErrBadSnapshot)
	}
	nodes := make(map[string]bool, len(snap.Nodes))
	for i, n := range snap.Nodes {
		if n.GPUs < 0 {
			return fmt.Errorf("%w: node %d (%q) has %d GPUs", ErrBadSnapshot, i, n.ID, n.GPUs)
		}
		if nodes[n.ID] {
			return fmt.Errorf("%w: duplicate node id %q", ErrBadSnapshot, n.ID)
		}
		nodes[n.ID] = true
	}
	jobs := make(map[string]bool, len(snap.Jobs))
	for j := range snap.Jobs {
		job := &snap.Jobs[j]
		if jobs[job.ID] {
			return fmt.Errorf("%w: duplicate job id %q", ErrBadSnapshot, job.ID)
		}
		jobs[job.ID] = true
		if job.MinReplicas < 0 || job.MaxReplicas < job.MinReplicas {
			return fmt.Errorf("%w: job %q replicas [%d, %d]", ErrBadSnapshot, job.ID, job.MinReplicas, job.MaxReplicas)
		}
		if !(job.Age >= 0) || math.IsInf(job.Age, 0) || job.Restarts < 0 {
			return fmt.Errorf("%w: job %q age %v restarts %d", ErrBadSnapshot, job.ID, job.Age, job.Restarts)
		}
		if !(job.RestartDelay >= 0) || math.IsInf(job.RestartDelay, 0) {
			return fmt.Errorf("%w: job %q restart delay %v", ErrBadSnapshot, job.ID, job.RestartDelay)
		}
		if !(job.Progress >= 0 && job.Progress <= 1) {
			return fmt.Errorf("%w: job %q progress %v, want a fraction in [0, 1]", ErrBadSnapshot, job.ID, job.Progress)
		}
		if math.IsNaN(job.Attained) || math.IsNaN(job.SubmitTime) {
			return fmt.Errorf("%w: job %q attained service or submit time is NaN", ErrBadSnapshot, job.ID)
		}
		for _, nc := range job.Current {
			if nc.Node < 0 || nc.Node >= len(snap.Nodes) || nc.Count <= 0 {
				return fmt.Errorf("%w: job %q current placement %v", ErrBadSnapshot, job.ID, job.Current)
			}
			if snap.Nodes[nc.Node].Type != snap.Nodes[job.Current[0].Node].Type {
				return fmt.Errorf("%w: job %q current placement %v spans GPU types", ErrBadSnapshot, job.ID, job.Current)
			}
		}
	}
	return nil
}

// normalize returns p sorted by node with duplicates merged (p must hold
// valid nodes and positive counts). It returns p itself when it is already
// normal.
func normalize(p Placement) Placement {
	ok := true
	for i := 1; i < len(p); i++ {
		if p[i].Node <= p[i-1].Node {
			ok = false
			break
		}
	}
	if ok {
		return p
	}
	q := append(Placement(nil), p...)
	sort.Slice(q, func(a, b int) bool { return q[a].Node < q[b].Node })
	out := q[:0]
	for _, nc := range q {
		if len(out) > 0 && out[len(out)-1].Node == nc.Node {
			out[len(out)-1].Count += nc.Count
			continue
		}
		out = append(out, nc)
	}
	return out
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return 1
	}
	return (a + b - 1) / b
}

// P is the power-mean exponent.
func (o *Objective) P() float64 { return o.p }

// Order is the repair priority order of the jobs (indexes into
// Snapshot.Jobs). The caller must not modify it.
func (o *Objective) Order() []int { return o.order }

// FairShare is the speedup base: N_fair nodes and K_fair replicas.
func (o *Objective) FairShare() (nodes, replicas int) { return o.nFair, o.kFair }

// Current is job j's normalised current placement.
func (o *Objective) Current(j int) Placement { return o.current[j] }

// Speedup is job j's speedup on k replicas over n nodes relative to its
// fair share.
func (o *Objective) Speedup(j, n, k int) float64 { return o.speed[j].at(n, k) }

// Scaled is job j's scaled speedup x_j under placement pl, restart penalty
// included.
func (o *Objective) Scaled(j int, pl Placement) float64 {
	var x float64
	if o.multiRack && o.topo.spans(0, pl) {
		x = o.speed[j].atRacks(o.topo.rackCount(pl), pl.Nodes(), pl.Replicas()) * o.scale
	} else {
		x = o.speed[j].at(pl.Nodes(), pl.Replicas()) * o.scale
	}
	if !pl.Equal(o.current[j]) {
		x *= o.factor[j]
	}
	return x
}

// term is job j's summand of the power mean under placement pl.
func (o *Objective) term(j int, pl Placement) float64 {
	return o.termOf(o.Scaled(j, pl))
}

func (o *Objective) termOf(x float64) float64 {
	switch o.p {
	case 0:
		return math.Log(math.Max(x, meanEps))
	case -1:
		return 1 / (x + meanEps)
	case 1:
		return x + meanEps
	}
	return math.Pow(x+meanEps, o.p)
}

// fromSum turns the sum of terms into the power mean.
func (o *Objective) fromSum(sum float64) float64 {
	n := float64(len(o.speed))
	if n == 0 {
		return 0
	}
	switch o.p {
	case 0:
		return math.Exp(sum / n)
	case -1:
		return n / sum
	case 1:
		return sum / n
	}
	return math.Pow(sum/n, 1/o.p)
}

// Fitness is the objective of an allocation (one placement per job, same
// index as Snapshot.Jobs). Higher is better.
func (o *Objective) Fitness(alloc []Placement) float64 {
	sum := 0.0
	for j := range o.speed {
		var pl Placement
		if j < len(alloc) {
			pl = alloc[j]
		}
		sum += o.term(j, pl)
	}
	return o.fromSum(sum)
}

// restrict is o on a part of the cluster: the jobs jobs (indexes into o's
// snapshot) on the nodes nodes (indexes, ascending) with capacity GPUs
// each. Speedups, restart factors, the fair share and the scale stay o's,
// so a job's term is the same in both; current placements are mapped to
// the part's node indexes (replicas elsewhere dropped), and the repair
// order is o's restricted to the jobs.
func (o *Objective) restrict(jobs, nodes, capacity []int) *Objective {
	snap := o.snap
	local := make(map[int]int, len(nodes))
	sub := &Snapshot{Seed: snap.Seed, Now: snap.Now, Levels: snap.Levels,
		Nodes: make([]Node, len(nodes)), Jobs: make([]Job, len(jobs))}
	for i, n := range nodes {
		local[n] = i
		sub.Nodes[i] = snap.Nodes[n]
		sub.Nodes[i].GPUs = capacity[i]
	}
	r := &Objective{
		snap: sub, p: o.p, scale: o.scale, kFair: o.kFair, nFair: o.nFair,
		speed:    make([]speedFn, len(jobs)),
		factor:   make([]float64, len(jobs)),
		current:  make([]Placement, len(jobs)),
		order:    make([]int, 0, len(jobs)),
		capacity: capacity,
	}
	pos := make(map[int]int, len(jobs))
	for i, j := range jobs {
		pos[j] = i
		job := &snap.Jobs[j]
		sub.Jobs[i] = Job{ID: job.ID, SubmitTime: job.SubmitTime, Age: job.Age, Attained: job.Attained,
			Restarts: job.Restarts, MinReplicas: job.MinReplicas, MaxReplicas: job.MaxReplicas, Topology: job.Topology}
		r.speed[i], r.factor[i] = o.speed[j], o.factor[j]
		var cur Placement
		for _, nc := range o.current[j] {
			if l, ok := local[nc.Node]; ok {
				cur = append(cur, NodeCount{Node: l, Count: nc.Count})
			}
		}
		r.current[i] = cur
		sub.Jobs[i].Current = cur
	}
	for _, j := range o.order {
		if i, ok := pos[j]; ok {
			r.order = append(r.order, i)
		}
	}
	r.topo, _ = buildTopo(sub)
	r.multiRack = r.topo != nil && r.topo.racks() > 1
	return r
}
