package sim

import (
	"encoding/binary"
	"math"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
	"pollux/testbed"
	"pollux/testbed/workload"
)

// Mode is how jobs choose their configuration, which depends on the policy
// they run under.
type Mode int

const (
	// Adaptive jobs (Pollux) pick their batch size and accumulation from
	// their fitted model; the policy picks their GPUs.
	Adaptive Mode = iota
	// FixedBatch jobs (Optimus) keep the workload's batch size; the policy
	// picks their GPUs.
	FixedBatch
	// FixedAll jobs (Tiresias) keep the workload's batch size and replica
	// count.
	FixedAll
)

// ModeFor is the job mode the reference testbed uses with a policy name.
func ModeFor(policy string) Mode {
	switch policy {
	case "tiresias":
		return FixedAll
	case "optimus":
		return FixedBatch
	}
	return Adaptive
}

// pinnedApps are applications whose jobs run one replica at a fixed batch
// under Pollux (NCF: its traces show no benefit from more).
var pinnedApps = map[string]int{"ncf": 32768}

// job is the simulator's state of one job.
type job struct {
	spec   workload.Job
	app    testbed.Application
	limits goodput.Limits
	index  int
	mode   Mode
	// batch is the fixed total batch (0 for adaptive jobs).
	batch int
	// maxReplicas caps the policy's choice (0: no cap beyond the mode's).
	pinned bool

	alloc    optimizer.Placement // counts per node index
	norm     []int               // normalised per-node counts
	nodes    int
	replicas int
	m, s     int

	restartLeft float64
	restarts    int // -1 before the first allocation
	progress    float64
	epoch       int
	attained    float64 // GPU-seconds
	executed    float64 // seconds with GPUs
	done        bool
	completion  float64

	profiled     map[[3]int]bool
	points       []goodput.ProfilePoint
	params       *goodput.Params
	grad         goodput.GradStats
	maxProfiledK int
	fits         int
	cache        *fitCache

	// cache of the true step times for the current placement.
	cacheM, cacheStep, cacheSync float64
}

func newJob(i int, spec workload.Job, app testbed.Application, mode Mode, cache *fitCache) *job {
	j := &job{
		spec:     spec,
		app:      app,
		limits:   app.Limits(),
		index:    i,
		mode:     mode,
		restarts: -1,
		profiled: map[[3]int]bool{},
		cacheM:   -1,
		cache:    cache,
	}
	switch mode {
	case FixedAll, FixedBatch:
		j.batch = spec.Batch
	default:
		if b, ok := pinnedApps[spec.App]; ok {
			j.batch = min(b, j.limits.MaxBatch)
			j.pinned = true
		}
	}
	return j
}

// running reports whether the job holds GPUs.
func (j *job) running() bool { return j.replicas > 0 }

// totalBatch is K*m*(s+1) of the current configuration.
func (j *job) totalBatch() int { return j.replicas * j.m * (j.s + 1) }

// fixedSplit is the configuration of a fixed total batch on k replicas:
// the split rule of the per-job search, with the atomic batch capped so
// the total stays within the largest batch.
func fixedSplit(l goodput.Limits, k int, batch float64) (m, s int) {
	m, s = l.Split(k, batch)
	if cap := l.MaxBatch / (k * (s + 1)); m > cap {
		m = cap
	}
	return max(m, 1), s
}

// configure picks (m, s) for the current placement.
func (j *job) configure() {
	if !j.running() {
		return
	}
	k := j.replicas
	switch {
	case j.batch > 0:
		j.m, j.s = fixedSplit(j.limits, k, float64(j.batch))
	case j.params == nil:
		j.m, j.s = fixedSplit(j.limits, k, math.Max(float64(j.limits.InitBatch), float64(j.limits.MinLocal*k)))
	default:
		md := goodput.Model{Params: *j.params, Grad: j.grad, Limits: j.limits}
		cfg, err := md.Optimize(j.nodes, k)
		if err != nil {
			j.m, j.s = fixedSplit(j.limits, k, math.Max(float64(j.limits.InitBatch), float64(j.limits.MinLocal*k)))
			return
		}
		j.m, j.s = cfg.LocalBatch, cfg.AccumSteps
		if cap := j.limits.MaxBatch / (k * (j.s + 1)); j.m > cap {
			j.m = max(cap, 1)
		}
	}
}

// stepTimes are the true step and sync time of the current configuration.
func (j *job) stepTimes() (step, sync float64) {
	m := float64(j.m)
	if m != j.cacheM {
		j.cacheStep, j.cacheSync = j.app.StepTimes(j.norm, m)
		j.cacheM = m
	}
	return j.cacheStep, j.cacheSync
}

// observe records a profiled configuration and refits the model when it
// is new. Fitting errors leave the previous model in place.
func (j *job) observe(step, sync float64, grad goodput.GradStats) {
	j.grad = grad
	key := [3]int{j.nodes, j.replicas, j.m}
	if j.profiled[key] {
		return
	}
	j.profiled[key] = true
	j.maxProfiledK = max(j.maxProfiledK, j.replicas)
	if j.mode != Adaptive {
		return
	}
	j.points = append(j.points, goodput.ProfilePoint{
		Nodes: j.nodes, Replicas: j.replicas, LocalBatch: j.m,
		AccumTime: step - sync, StepTime: step,
	})
	p, err := j.cache.fit(j.spec.App, j.points)
	if err == nil {
		j.params = &p
		j.fits++
	}
}

// fitCache memoises fits within one run: jobs of one application that
// profile the same configurations in the same order get the same model, and
// Fit is pure, so the cache changes no result.
type fitCache struct {
	models map[string]goodput.Params
	key    []byte
	hits   int
}

func (c *fitCache) fit(app string, points []goodput.ProfilePoint) (goodput.Params, error) {
	k := append(c.key[:0], app...)
	for _, p := range points {
		k = binary.LittleEndian.AppendUint32(k, uint32(p.Nodes))
		k = binary.LittleEndian.AppendUint32(k, uint32(p.Replicas))
		k = binary.LittleEndian.AppendUint32(k, uint32(p.LocalBatch))
		k = binary.LittleEndian.AppendUint64(k, math.Float64bits(p.AccumTime))
		k = binary.LittleEndian.AppendUint64(k, math.Float64bits(p.StepTime))
	}
	c.key = k
	if p, ok := c.models[string(k)]; ok {
		c.hits++
		return p, nil
	}
	p, err := goodput.Fit(points)
	if err != nil {
		return p, err
	}
	c.models[string(k)] = p
	return p, nil
}

// advance runs the job for seconds of simulated time starting at now.
func (j *job) advance(now, seconds, interference float64) {
	if j.done || !j.running() {
		return
	}
	k := float64(j.replicas)
	delay := math.Min(j.restartLeft, seconds)
	j.restartLeft -= delay
	j.attained += delay * k
	j.executed += delay
	now += delay
	seconds -= delay
	for seconds > 0 && !j.done {
		step, sync := j.stepTimes()
		accum := step - sync
		batch := float64(j.totalBatch())
		grad := j.app.GradStats(batch, j.epoch)
		gain := grad.Gain(batch, float64(j.limits.InitBatch))
		j.observe(step, sync, grad)
		iter := step + float64(j.s)*accum
		rate := gain / iter * (1 - interference)
		next := j.app.EpochEnd(j.epoch + 1)
		if !(rate > 0) {
			// No progress possible (full interference): the time passes.
			j.attained += seconds * k
			j.executed += seconds
			return
		}
		if j.progress+rate*seconds < next {
			j.progress += rate * seconds
			j.attained += seconds * k
			j.executed += seconds
			seconds = 0
		} else {
			j.epoch++
			delta := math.Min(math.RoundToEven((next-j.progress)/rate), seconds)
			j.progress = next
			j.attained += delta * k
			j.executed += delta
			now += delta
			seconds -= delta
			if j.epoch >= j.app.MaxEpochs() {
				j.done = true
				j.completion = now
			}
		}
		j.configure()
	}
}

// reallocate applies a new placement; alloc must differ from the current.
// layout is its counts in the order the policy took the nodes (nil: node
// order); its smallest rotation is the placement whose measured step time
// applies.
func (j *job) reallocate(alloc optimizer.Placement, layout []int, restart float64) {
	j.alloc = append(optimizer.Placement(nil), alloc...)
	if layout == nil {
		layout = make([]int, len(alloc))
		for i, nc := range alloc {
			layout[i] = nc.Count
		}
	}
	j.norm = testbed.NormalizePlacement(layout)
	j.nodes, j.replicas = len(j.norm), testbed.Replicas(j.norm)
	j.cacheM = -1
	if !j.running() {
		j.m, j.s = 0, 0
		return
	}
	j.configure()
	j.restartLeft = restart
	j.restarts++
}
