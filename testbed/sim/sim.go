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
	"pollux/testbed/workload"
)

// Config is the simulated cluster and run.
type Config struct {
	// Nodes and GPUsPerNode shape the cluster.
	Nodes       int `json:"nodes"`
	GPUsPerNode int `json:"gpus_per_node"`
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
}

// DefaultConfig is the reference testbed: 16 nodes of 4 GPUs, a 60 s
// interval, 30 s restarts, no interference.
func DefaultConfig() Config {
	return Config{Nodes: 16, GPUsPerNode: 4, Interval: 60, Restart: 30, Horizon: 60 * 24 * 3600}
}

// Validate reports whether the configuration can be simulated.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 4096:
		return fmt.Errorf("%w: %d nodes, want 1..4096", ErrBadConfig, c.Nodes)
	case c.GPUsPerNode < 1 || c.GPUsPerNode > 64:
		return fmt.Errorf("%w: %d GPUs per node, want 1..64", ErrBadConfig, c.GPUsPerNode)
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
	// FTF is the finish-time fairness ratio: JCT over the time the job
	// would take alone on an equal share of the cluster.
	FTF float64 `json:"ftf"`
	// Fits counts the job's throughput-model refits.
	Fits int `json:"fits"`
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
}

// Result is one simulated run.
type Result struct {
	Policy   string      `json:"policy"`
	Workload string      `json:"workload"`
	Jobs     []JobResult `json:"jobs"`
	Timeline []Sample    `json:"timeline"`
	Rounds   int         `json:"rounds"`
	Metrics  Metrics     `json:"metrics"`
}

// Run replays wl on the cluster of cfg under pol, with jobs in mode (see
// ModeFor). The policy's search state is carried from round to round.
// progress may be nil.
func Run(ctx context.Context, cfg Config, cat testbed.Catalog, wl workload.Workload, pol optimizer.Policy, mode Mode, progress ProgressFunc) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(wl.Jobs) == 0 {
		return nil, fmt.Errorf("%w: workload %q has no jobs", ErrBadConfig, wl.Name)
	}
	s := &state{cfg: cfg, pol: pol, mode: mode, steps: map[stepKey][]float64{}}
	cache := &fitCache{models: map[string]goodput.Params{}}
	for i, spec := range wl.Jobs {
		app, ok := cat[spec.App]
		if !ok {
			return nil, fmt.Errorf("%w: job %q names %q", ErrUnknownApp, spec.Name, spec.App)
		}
		s.jobs = append(s.jobs, newJob(i, spec, app, mode, cache))
	}
	sort.SliceStable(s.jobs, func(a, b int) bool { return s.jobs[a].spec.Time < s.jobs[b].spec.Time })
	for i := 0; i < cfg.Nodes; i++ {
		s.nodes = append(s.nodes, optimizer.Node{ID: "node-" + strconv.Itoa(i), GPUs: cfg.GPUsPerNode})
	}
	res := &Result{Policy: pol.Name(), Workload: wl.Name}
	done := 0
	for done < len(s.jobs) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.now >= cfg.Horizon {
			return nil, fmt.Errorf("%w: %d of %d jobs still running after %v s", ErrHorizon, len(s.jobs)-done, len(s.jobs), cfg.Horizon)
		}
		s.advance()
		if err := s.allocate(); err != nil {
			return nil, err
		}
		res.Rounds++
		done = 0
		for _, j := range s.jobs {
			if j.done {
				done++
			}
		}
		res.Timeline = append(res.Timeline, s.sample())
		if progress != nil {
			progress(s.now, done, len(s.jobs))
		}
	}
	res.Jobs = s.results(res.Timeline)
	res.Metrics = Summarize(res.Jobs)
	return res, nil
}

// stepKey names a cached Optimus step-time table.
type stepKey struct {
	app   string
	batch int
}

type state struct {
	cfg   Config
	pol   optimizer.Policy
	mode  Mode
	jobs  []*job
	nodes []optimizer.Node
	now   float64
	round uint64
	prev  *optimizer.State
	steps map[stepKey][]float64
}

// advance moves every job forward by one interval.
func (s *state) advance() {
	var slow map[int]bool
	if s.cfg.Interference > 0 {
		slow = s.interfering()
	}
	for _, j := range s.jobs {
		f := 0.0
		if slow != nil && len(j.alloc) > 1 {
			for _, nc := range j.alloc {
				if slow[nc.Node] {
					f = s.cfg.Interference
					break
				}
			}
		}
		j.advance(s.now, s.cfg.Interval, f)
	}
	s.now += s.cfg.Interval
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
func (s *state) allocate() error {
	act := s.active()
	if len(act) == 0 {
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
			used[nc.Node] += nc.Count
		}
	}
	for n, u := range used {
		if u > s.nodes[n].GPUs {
			return fmt.Errorf("%w: %s put %d replicas on node %d of %d GPUs", ErrPolicy, s.pol.Name(), u, n, s.nodes[n].GPUs)
		}
	}
	for i, j := range act {
		if next[i].Equal(j.alloc) {
			continue
		}
		var layout []int
		if i < len(res.Layouts) && res.Layouts[i] != nil {
			layout = res.Layouts[i]
			if !sameCounts(layout, next[i]) {
				return fmt.Errorf("%w: %s gave job %q the layout %v for placement %v", ErrPolicy, s.pol.Name(), j.spec.Name, layout, next[i])
			}
		}
		j.reallocate(next[i], layout, s.cfg.Restart)
	}
	s.prev = res.State
	return nil
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
	return min(max(2*j.maxProfiledK, 1), 64, byBatch)
}

func (s *state) snapshotJob(j *job) optimizer.Job {
	sj := optimizer.Job{
		ID:          j.spec.Name,
		SubmitTime:  j.spec.Time,
		Age:         s.now - j.spec.Time,
		Attained:    j.attained,
		Restarts:    max(j.restarts, 0),
		MinReplicas: 0,
		MaxReplicas: s.maxReplicas(j),
		Current:     j.alloc,
	}
	switch s.mode {
	case FixedAll:
		sj.Replicas = j.spec.Replicas
		sj.Executed = j.executed
	case FixedBatch:
		sj.Oracle = &oracle{s: s, j: j}
	default:
		if j.params != nil {
			sj.Model = &goodput.Model{Params: *j.params, Grad: j.grad, Limits: j.limits}
		}
	}
	return sj
}
