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
	// Adaptive jobs (Pollux, Sia and the heterogeneity-aware Pollux) pick
	// their batch size and accumulation from their fitted model, one per
	// GPU type; the policy picks their GPUs.
	Adaptive Mode = iota
	// FixedBatch jobs (Optimus) keep the workload's batch size; the policy
	// picks their GPUs.
	FixedBatch
	// FixedAll jobs (Tiresias) keep the workload's batch size and replica
	// count.
	FixedAll
	// Merged jobs are adaptive but blind to GPU types: one model fitted on
	// every measurement whatever the type it was taken on (Pollux on a
	// heterogeneous cluster, as Sia's artifact runs it).
	Merged
	// FixedLocal jobs keep a fixed per-GPU batch (M0 within the atomic
	// batch range, no accumulation), so that their total batch grows with
	// their GPUs, as under Or et al.'s throughput-based autoscaler; they
	// fit a throughput model for the policy, which picks their GPUs.
	FixedLocal
)

// ModeFor is the job mode the reference testbeds use with a policy name.
func ModeFor(policy string) Mode {
	switch policy {
	case "tiresias":
		return FixedAll
	case "optimus":
		return FixedBatch
	case "pollux-unaware":
		return Merged
	case "throughput-autoscale":
		return FixedLocal
	}
	return Adaptive
}

// pinnedApps are applications whose jobs run one replica at a fixed batch
// under Pollux (NCF: its traces show no benefit from more).
var pinnedApps = map[string]int{"ncf": 32768}

// mergedKey is the profile key of a Merged job (one model for all types).
const mergedKey = "\x00merged"

// profile is what a job has measured on one GPU type and the model it fits.
type profile struct {
	// seen maps every profiled configuration to its point (-1: not
	// recorded, for jobs that fit no model).
	seen   map[[4]int]int
	points []goodput.ProfilePoint
	// counts is how many measurements each point's times average, and
	// fitStep each point's step time when the model was last fitted.
	counts  []int
	fitStep []float64
	params  *goodput.Params
	maxK    int
}

// job is the simulator's state of one job.
type job struct {
	spec  workload.Job
	index int
	mode  Mode
	sem   Semantics
	// apps is the job's application on every GPU type of the cluster.
	apps map[string]testbed.Application
	// typ is the GPU type the job runs (or last ran) on; app and limits
	// are its application and batch limits there.
	typ    string
	app    testbed.Application
	limits goodput.Limits
	// batch is the fixed total batch (0 for adaptive jobs).
	batch int
	// local is the fixed per-GPU batch of a FixedLocal job (0 otherwise).
	local int
	// pinned jobs run one replica at a fixed batch.
	pinned bool
	// calib scales true progress (Sia's per-application calibration: its
	// jobs run slower than the traces say); 1 otherwise.
	calib float64
	// restartCost is what each (re)allocation costs, in seconds.
	restartCost float64
	// physical is the most nodes a placement's step time may span on each
	// type (Sia's simulator respreads larger placements over them).
	physical map[string]int

	alloc    optimizer.Placement // counts per node index
	layout   []int               // counts in the order the policy took the nodes
	norm     []int               // smallest rotation of layout
	nodes    int
	replicas int
	m, s     int
	// racks is how many racks the placement spans; rackAware whether the
	// job knows its racks (it then records them with its measurements
	// and sizes its batch for them); crossExtra the time the network
	// across racks adds to each synchronised step at the moment (links),
	// and trueCross / trueCrossTime the time average of it per
	// goodput.RackShare, what a fitted cross-rack term should approach.
	racks                    int
	rackAware                bool
	crossExtra               float64
	trueCross, trueCrossTime float64

	restartLeft float64
	restarts    int // -1 before the first allocation
	// evicted marks a job that lost GPUs to a change of the cluster's
	// nodes (Stepper.SetNodes): it restarts at the next allocation even
	// if the policy keeps what it has left.
	evicted bool
	// measuredRestart is the restart delay the job has experienced (0 before
	// its first start completed): what it reports to type-aware policies.
	measuredRestart float64
	progress        float64
	epoch           int
	attained        float64 // GPU-seconds
	executed        float64 // seconds with GPUs
	done            bool
	completion      float64
	// allocated is GPUs x interval summed over the rounds the job held
	// GPUs (Sia's accounting of GPU-hours); crossAllocated the part of it
	// on placements across racks.
	allocated      float64
	crossAllocated float64
	// contSum and contN accumulate the jobs active at each round the job
	// was active (its contention, for finish-time fairness).
	contSum float64
	contN   int

	profiles map[string]*profile
	grad     goodput.GradStats
	fits     int
	cache    *fitCache

	// cache of the true step times for the current placement.
	cacheM, cacheStep, cacheSync float64
}

func newJob(i int, spec workload.Job, apps map[string]testbed.Application, first string, mode Mode, sem Semantics, cache *fitCache) *job {
	j := &job{
		spec:        spec,
		apps:        apps,
		index:       i,
		mode:        mode,
		sem:         sem,
		restarts:    -1,
		profiles:    map[string]*profile{},
		cacheM:      -1,
		cache:       cache,
		calib:       1,
		restartCost: 0,
		physical:    map[string]int{},
	}
	j.setType(first)
	for t, a := range apps {
		if tp, ok := a.(testbed.TypeProfile); ok && sem == SiaSemantics {
			j.physical[t] = tp.ProfiledNodes()
		}
	}
	if sem == SiaSemantics {
		j.calib = 1 / siaSlowdown(spec.App)
	}
	switch mode {
	case FixedAll, FixedBatch:
		j.batch = spec.Batch
	case FixedLocal:
		if b, ok := pinnedApps[spec.App]; ok {
			j.batch = min(b, j.limits.MaxBatch)
			j.pinned = true
		} else {
			j.local = fixedLocal(j.limits)
		}
	default:
		if b, ok := pinnedApps[spec.App]; ok {
			j.batch = min(b, j.limits.MaxBatch)
			j.pinned = true
		}
	}
	return j
}

// setType makes t the job's current GPU type.
func (j *job) setType(t string) {
	j.typ = t
	j.app = j.apps[t]
	j.limits = j.app.Limits()
}

// prof is the profile the job's measurements on the current type go to.
func (j *job) prof() *profile {
	key := j.typ
	if j.mode == Merged {
		key = mergedKey
	}
	p := j.profiles[key]
	if p == nil {
		p = &profile{seen: map[[4]int]int{}}
		j.profiles[key] = p
	}
	return p
}

// params is the job's throughput model on the current type (nil before
// its first fit there).
func (j *job) params() *goodput.Params {
	return j.prof().params
}

// maxProfiledK is the most replicas the job has measured on any type.
func (j *job) maxProfiledK() int {
	k := 0
	for _, p := range j.profiles {
		k = max(k, p.maxK)
	}
	return k
}

// reportedProgress is what the job reports of its progress, as a live
// job does: the whole epochs it has finished over the epochs it trains for
// (optimizer.EpochProgress), not its exact progress within an epoch.
func (j *job) reportedProgress() float64 {
	return optimizer.EpochProgress(j.epoch, j.app.MaxEpochs())
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

// fixedLocal is the per-GPU batch of a FixedLocal job: M0 within the
// atomic batch range.
func fixedLocal(l goodput.Limits) int { return min(max(l.InitBatch, l.MinLocal), l.MaxLocal) }

// configure picks (m, s) for the current placement.
func (j *job) configure() {
	if !j.running() {
		return
	}
	if j.sem == SiaSemantics {
		j.configureSia()
		return
	}
	k := j.replicas
	params := j.params()
	switch {
	case j.batch > 0:
		j.m, j.s = fixedSplit(j.limits, k, float64(j.batch))
	case j.local > 0:
		j.m, j.s = min(j.local, max(j.limits.MaxBatch/k, 1)), 0
	case params == nil:
		j.m, j.s = fixedSplit(j.limits, k, math.Max(float64(j.limits.InitBatch), float64(j.limits.MinLocal*k)))
	default:
		md := j.model(*params, j.limits)
		cfg, err := md.OptimizeRacks(j.knownRacks(), j.nodes, k)
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

// configureSia picks (m, s) as the jobs of Sia's simulator do: the atomic
// batch is bounded by the largest one measured on the placement (and on
// placements of as many replicas), the model's best batch otherwise.
func (j *job) configureSia() {
	k := j.replicas
	l := j.limits
	pl, hasPL := j.app.(testbed.PlacementLimits)
	if hasPL {
		l.MaxLocal = max(pl.MaxLocalFor(j.norm), l.MinLocal)
	}
	params := j.params()
	batch := 0.0
	switch {
	case j.batch > 0:
		batch = float64(j.batch)
	case params == nil:
		batch = math.Max(float64(l.InitBatch), float64(l.MinLocal*k))
	default:
		md := j.model(*params, l)
		cfg, err := md.OptimizeRacks(j.knownRacks(), j.nodes, k)
		if err != nil {
			batch = math.Max(float64(l.InitBatch), float64(l.MinLocal*k))
			break
		}
		j.m, j.s = cfg.LocalBatch, cfg.AccumSteps
	}
	if batch > 0 {
		j.m, j.s = l.Split(k, batch)
	}
	if hasPL {
		if c, ok := pl.MemoryCap(k); ok && j.m > c {
			j.m = c
		}
	}
	if cap := l.MaxBatch / (k * (j.s + 1)); j.m > cap {
		j.m = cap
	}
	j.m = max(j.m, 1)
}

// model is the job's goodput model with params and limits.
func (j *job) model(params goodput.Params, l goodput.Limits) goodput.Model {
	return goodput.Model{Params: params, Grad: j.grad, Limits: l}
}

// knownRacks is how many racks the job knows its placement spans (1 when
// it is blind to racks).
func (j *job) knownRacks() int {
	if j.rackAware {
		return max(j.racks, 1)
	}
	return 1
}

// stepTimes are the true step and sync time of the current configuration:
// the traces', plus what the network across racks adds (links).
func (j *job) stepTimes() (step, sync float64) {
	m := float64(j.m)
	if m != j.cacheM {
		j.cacheStep, j.cacheSync = j.app.StepTimes(j.norm, m)
		if j.racks > 1 {
			j.cacheStep += j.crossExtra
			j.cacheSync += j.crossExtra
		}
		j.cacheM = m
	}
	return j.cacheStep, j.cacheSync
}

// setCrossExtra sets what the network across racks adds to each
// synchronised step.
func (j *job) setCrossExtra(x float64) {
	if x != j.crossExtra {
		j.crossExtra = x
		j.cacheM = -1
	}
}

// crossDrift is how far a configuration's mean step time across racks
// may move from the one the model was fitted on before the job refits.
const crossDrift = 0.05

// observe records a profiled configuration and refits the model when it
// is new. Across racks, where the step time depends on the other jobs
// crossing the same uplinks, a configuration seen again averages its
// measurements, and the model is refitted once the mean has moved by
// more than crossDrift. Fitting errors leave the previous model in place.
func (j *job) observe(step, sync float64, grad goodput.GradStats) {
	j.grad = grad
	p := j.prof()
	racks := 0
	if j.rackAware && j.racks > 1 {
		racks = j.racks
	}
	key := [4]int{j.nodes, j.replicas, j.m, racks}
	if i, ok := p.seen[key]; ok {
		if i < 0 || j.racks < 2 {
			return
		}
		p.counts[i]++
		pt := &p.points[i]
		w := 1 / float64(p.counts[i])
		pt.StepTime += (step - pt.StepTime) * w
		pt.AccumTime += (step - sync - pt.AccumTime) * w
		if math.Abs(pt.StepTime-p.fitStep[i]) <= crossDrift*p.fitStep[i] {
			return
		}
		j.refit(p)
		return
	}
	p.seen[key] = -1
	p.maxK = max(p.maxK, j.replicas)
	if j.mode != Adaptive && j.mode != Merged && j.mode != FixedLocal {
		return
	}
	p.seen[key] = len(p.points)
	p.points = append(p.points, goodput.ProfilePoint{
		Nodes: j.nodes, Replicas: j.replicas, LocalBatch: j.m,
		AccumTime: step - sync, StepTime: step, Racks: racks,
	})
	p.counts = append(p.counts, 1)
	p.fitStep = append(p.fitStep, step)
	j.refit(p)
}

// refit fits p's model on its points.
func (j *job) refit(p *profile) {
	for i := range p.points {
		p.fitStep[i] = p.points[i].StepTime
	}
	fit, err := j.cache.fit(j.spec.App, p.points)
	if err == nil {
		p.params = &fit
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
		k = binary.LittleEndian.AppendUint32(k, uint32(p.Racks))
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
	if j.restartLeft <= 0 && j.measuredRestart == 0 {
		j.measuredRestart = j.restartCost
	}
	for seconds > 0 && !j.done {
		step, sync := j.stepTimes()
		accum := step - sync
		batch := float64(j.totalBatch())
		grad := j.app.GradStats(batch, j.epoch)
		gain := grad.Gain(batch, float64(j.limits.InitBatch))
		j.observe(step, sync, grad)
		iter := step + float64(j.s)*accum
		rate := gain / iter * (1 - interference) * j.calib
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

// place applies a new placement on GPU type typ: layout is its counts in
// the order the policy took the nodes (nil: node order), whose smallest
// rotation is the placement whose measured step time applies. It reports
// whether the job restarts: under the Pollux artifact's semantics every
// change does; under Sia's only a change of GPU type or of the placement
// tuple does (a job moved to other nodes with the same tuple keeps
// running), and a job whose GPUs are taken away is suspended without
// counting a restart.
func (j *job) place(alloc optimizer.Placement, layout []int, typ string, restart float64, racks int) {
	if layout == nil && len(alloc) > 0 {
		layout = make([]int, len(alloc))
		for i, nc := range alloc {
			layout[i] = nc.Count
		}
	}
	if j.sem == SiaSemantics && len(alloc) > 0 {
		layout = respread(layout, j.physical[typ])
	}
	wasRunning := j.running()
	j.evicted = false
	if j.sem == SiaSemantics && wasRunning && len(alloc) > 0 && typ == j.typ && equalInts(layout, j.layout) {
		j.alloc = append(optimizer.Placement(nil), alloc...)
		if racks != j.racks {
			j.racks = racks
			j.cacheM = -1
		}
		return
	}
	j.alloc = append(optimizer.Placement(nil), alloc...)
	j.racks = racks
	j.layout = layout
	j.norm = testbed.NormalizePlacement(layout)
	j.nodes, j.replicas = len(j.norm), testbed.Replicas(j.norm)
	j.cacheM = -1
	if !j.running() {
		j.m, j.s = 0, 0
		return
	}
	if typ != j.typ {
		j.setType(typ)
	}
	j.configure()
	j.restartLeft = restart
	j.restartCost = restart
	j.restarts++
}

// respread is Sia's simulator's fix for a placement over more nodes than
// the type was profiled on: the replicas spread evenly (rounding up) over
// that many nodes.
func respread(layout []int, physical int) []int {
	if physical <= 0 || len(layout) <= physical {
		return layout
	}
	k := testbed.Replicas(layout)
	per := (k + physical - 1) / physical
	var out []int
	for k > 0 {
		c := min(per, k)
		out = append(out, c)
		k -= c
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
