package dashboard

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sync"

	"pollux/actors/server/api"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
)

// Health values of an Overview: what the page may claim about its data.
const (
	// HealthOK: the leader answered a linearizable read, or a follower
	// heard from a leader recently.
	HealthOK = "ok"
	// HealthStale: a follower that has not heard from a leader for
	// longer than StaleAfter (or knows none): its copy may be behind.
	HealthStale = "stale"
	// HealthNoQuorum: this server leads but could not confirm it with a
	// majority: no write can commit, and its copy may be behind.
	HealthNoQuorum = "no-quorum"
)

// Overview is everything the dashboard's pages show of the cluster: the
// answer of GET PathOverview, and the data embedded in every page.
type Overview struct {
	// Serving is the server that answered; Leader the leader it knows
	// ("" none); IsLeader whether it is that leader.
	Serving  string `json:"serving"`
	Leader   string `json:"leader"`
	IsLeader bool   `json:"is_leader"`
	Term     uint64 `json:"term"`
	// Generation is the committed allocation's.
	Generation uint64 `json:"generation"`
	// Health is HealthOK, HealthStale or HealthNoQuorum, and
	// HealthReason says why when it is not OK. Stale is the API's flag
	// (a follower's local copy).
	Health       string `json:"health"`
	HealthReason string `json:"health_reason,omitempty"`
	Stale        bool   `json:"stale"`
	// LastContact is how long ago (seconds) a follower last heard from
	// the leader (absent on the leader or when unknown).
	LastContact *float64 `json:"last_contact_seconds,omitempty"`
	// Now is the server's clock (Unix seconds) when it answered.
	Now float64 `json:"now"`
	// GPUs are those of alive nodes; GPUsUsed those the allocation uses.
	GPUs     int            `json:"gpus"`
	GPUsUsed int            `json:"gpus_used"`
	JobCount map[string]int `json:"jobs_by_state"`
	// Goodput is the sum over running jobs of Job.Goodput.
	Goodput float64 `json:"goodput"`
	Racks   []Rack  `json:"racks"`
	Jobs    []Job   `json:"jobs"`
	Peers   []Peer  `json:"peers"`
	// LastRound is the last allocation round this server ran (only a
	// server that has led has one).
	LastRound *api.RoundJSON `json:"last_round,omitempty"`
	// Autoscale is the autoscaler's machines and what they cost (as
	// GET /v1/status shows it; absent when the cluster never autoscaled).
	Autoscale *api.AutoscaleJSON `json:"autoscale,omitempty"`
	// Series are the samples of this server's ring newer than the
	// request's since (all of them without one).
	Series []Sample `json:"series"`
	// SampleEvery is the ring's sampling period in seconds.
	SampleEvery float64 `json:"sample_every_seconds"`
	Viewer      Viewer  `json:"viewer"`
}

// Rack is one rack of the cluster grid and its nodes.
type Rack struct {
	Name  string `json:"name"`
	Nodes []Node `json:"nodes"`
}

// Node is one node of the grid: Slots holds, per GPU, the job using it
// ("" free), jobs in id order, each on consecutive GPUs.
type Node struct {
	ID      string   `json:"id"`
	Health  string   `json:"health"`
	GPUType string   `json:"gpu_type,omitempty"`
	GPUs    int      `json:"gpus"`
	Used    int      `json:"gpus_used"`
	Slots   []string `json:"slots"`
}

// Job is one job of the jobs table: the API's view of it (the same
// fields as GET /v1/jobs) and what its bid says about its current
// placement.
type Job struct {
	api.Job
	// Active: pending, running or rescaling (not finished).
	Active bool `json:"active"`
	// BatchSize is the total batch K*m*(s+1) of its batch configuration
	// on its placement, LocalBatch m and AccumSteps s, Gain its AdaScale
	// gain (all 0 without a bid covering the placement).
	BatchSize  int     `json:"batch_size"`
	LocalBatch int     `json:"local_bsz"`
	AccumSteps int     `json:"accum_steps"`
	Gain       float64 `json:"gain"`
	// Goodput is the model's goodput of that configuration (samples per
	// second at the initial batch's statistical efficiency), Speedup
	// that over the model's best on one GPU (0 without a model).
	Goodput float64 `json:"goodput"`
	Speedup float64 `json:"speedup"`
}

// Peer is one Raft server of the control-plane view.
type Peer struct {
	ID     string `json:"id"`
	Voter  bool   `json:"voter"`
	Leader bool   `json:"leader"`
	Alive  bool   `json:"alive"`
	Rack   string `json:"rack,omitempty"`
	// Serving marks the server that answered.
	Serving bool `json:"serving"`
}

// Viewer is who looks: the token's name and role, and what the page may
// offer it (nothing else changes state).
type Viewer struct {
	Name     string `json:"name"`
	Role     string `json:"role"`
	Accessor string `json:"accessor,omitempty"`
	// CancelAny: an admin (any job); CancelOwn: a submit token (its own
	// jobs: those whose submitter_accessor is Accessor).
	CancelAny bool `json:"cancel_any"`
	CancelOwn bool `json:"cancel_own"`
}

// JobDetail is one job's page: the job, its model, its measured profile
// against the fitted curve, its speedup curve and its gradient-noise
// history on this server.
type JobDetail struct {
	Job
	Limits goodput.Limits  `json:"limits"`
	Model  *goodput.Params `json:"model,omitempty"`
	Grad   *GradPoint      `json:"grad,omitempty"`
	// Profile are the measured configurations with their times.
	Profile []ProfilePoint `json:"profile"`
	// Fit is the fitted throughput over the local batch, one curve per
	// measured (GPU type, nodes, replicas) shape, each by the model of its
	// type (the top-level model for untyped measurements).
	Fit []FitCurve `json:"fit"`
	// Speedups is the goodput speedup over one GPU of the job's
	// configuration for 1..K replicas, on one node and on several.
	Speedups []SpeedupPoint `json:"speedups"`
	// TypeSpeedups are the same curves per GPU type the bid has a model
	// for, by that type's model and batch choices (none for a job
	// measured on untyped nodes only).
	TypeSpeedups []TypeSpeedups `json:"type_speedups,omitempty"`
	// GradHistory are the gradient statistics this server saw over time
	// (its ring, since it started).
	GradHistory []GradPoint      `json:"grad_history"`
	Single      []api.ChoiceJSON `json:"single_node"`
	Multi       []api.ChoiceJSON `json:"multi_node"`
}

// ProfilePoint is one measured configuration.
type ProfilePoint struct {
	goodput.ProfilePoint
	Count uint64 `json:"count"`
	// Throughput is the measured samples per second,
	// Replicas*LocalBatch/StepTime; Fitted what the model predicts.
	Throughput float64 `json:"throughput"`
	Fitted     float64 `json:"fitted,omitempty"`
	// GPUType is the type of the nodes it was measured on ("" untyped).
	GPUType string `json:"gpu_type,omitempty"`
}

// FitCurve is the fitted throughput of one shape: points (local batch,
// samples per second).
type FitCurve struct {
	GPUType  string       `json:"gpu_type,omitempty"`
	Nodes    int          `json:"nodes"`
	Replicas int          `json:"replicas"`
	Points   [][2]float64 `json:"points"`
}

// SpeedupPoint is the speedup of k replicas.
type SpeedupPoint struct {
	Replicas int     `json:"replicas"`
	Single   float64 `json:"single_node,omitempty"`
	Multi    float64 `json:"multi_node,omitempty"`
}

// TypeSpeedups is a job's speedup curve on one GPU type: OneGPU is the
// best goodput of that type's model on one GPU of it (samples per second
// at the initial batch's statistical efficiency), the base of Points.
type TypeSpeedups struct {
	GPUType string         `json:"gpu_type"`
	OneGPU  float64        `json:"one_gpu_goodput"`
	Points  []SpeedupPoint `json:"points"`
}

// GradPoint is a job's gradient statistics at a time: NoiseScale is
// M0*GradVar/GradSqr, the batch size at which the gradient's noise
// equals its signal.
type GradPoint struct {
	Time       float64 `json:"t"`
	GradSqr    float64 `json:"grad_sqr"`
	GradVar    float64 `json:"grad_var"`
	NoiseScale float64 `json:"noise_scale"`
}

func gradPoint(t float64, g goodput.GradStats, m0 int) GradPoint {
	p := GradPoint{Time: t, GradSqr: g.GradSqr, GradVar: g.GradVar}
	if g.GradSqr > 0 && m0 > 0 {
		p.NoiseScale = finite(float64(m0) * g.GradVar / g.GradSqr)
	}
	return p
}

// gradOf is a job's latest gradient statistics: those its workers'
// profile recorded, else those of its actor's bid.
func gradOf(j *state.Job) (goodput.GradStats, bool) {
	if j.HasGrad {
		return j.Grad, true
	}
	return j.Bid.Grad, j.Bid.Version > 0 && j.Bid.HasGrad
}

// finite maps NaN and infinities to 0 (JSON cannot carry them).
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// active reports whether a job is not finished.
func active(s state.JobState) bool { return !s.Terminal() }

// jobsOf builds the jobs table of st: the API's jobs and their batch
// configuration and goodput on their placement.
func jobsOf(st *state.State, bases *baseCache) []Job {
	var out []Job
	for _, aj := range api.JobsOf(st) {
		j := st.Jobs[aj.ID]
		aj.Profiled = nil
		out = append(out, jobOf(j, aj, bases))
	}
	return out
}

// baseCache memoises each job's best goodput on one GPU, the base of its
// speedup, per bid: the search is most of a poll's work otherwise.
type baseCache struct {
	mu sync.Mutex
	m  map[string]baseEntry
}

type baseEntry struct {
	session, version uint64
	gpuType          string
	goodput          float64
}

// base is the best goodput of j's model md (its model on GPU type typ) on
// one GPU (0: none).
func (c *baseCache) base(j *state.Job, typ string, md *goodput.Model) float64 {
	if c != nil {
		c.mu.Lock()
		e, ok := c.m[j.ID]
		c.mu.Unlock()
		if ok && e.session == j.Bid.Session && e.version == j.Bid.Version && e.gpuType == typ {
			return e.goodput
		}
	}
	g := 0.0
	if one, err := md.Optimize(1, 1); err == nil && one.Goodput > 0 {
		g = one.Goodput
	}
	if c != nil {
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]baseEntry{}
		}
		c.m[j.ID] = baseEntry{session: j.Bid.Session, version: j.Bid.Version, gpuType: typ, goodput: g}
		c.mu.Unlock()
	}
	return g
}

// prune forgets the jobs that st no longer holds.
func (c *baseCache) prune(st *state.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if st.Jobs[id] == nil {
			delete(c.m, id)
		}
	}
}

func jobOf(j *state.Job, aj api.Job, bases *baseCache) Job {
	out := Job{Job: aj, Active: active(j.State)}
	if aj.GPUs == 0 {
		return out
	}
	// The job runs what its bid chose for the type it is placed on, and
	// its goodput there is by that type's model (the best-known one on a
	// type it has no model on yet).
	typ := ""
	if len(aj.Placement) > 0 {
		typ = aj.Placement[0].GPUType
	}
	c, ok := j.Bid.ChoiceOn(typ, aj.Nodes, aj.GPUs)
	if !ok {
		return out
	}
	out.LocalBatch, out.AccumSteps, out.Gain = c.LocalBatch, c.AccumSteps, finite(c.Gain)
	out.BatchSize = aj.GPUs * c.LocalBatch * (c.AccumSteps + 1)
	md := j.Bid.TypeModel(typ, j.Spec.Limits)
	if md == nil {
		md = j.Bid.Model(j.Spec.Limits)
	}
	if md == nil {
		return out
	}
	out.Goodput = finite(md.Goodput(aj.Nodes, aj.GPUs, c.LocalBatch, c.AccumSteps))
	if base := bases.base(j, typ, md); base > 0 {
		out.Speedup = finite(out.Goodput / base)
	}
	return out
}

// racksOf builds the cluster grid of st: racks by name, nodes by id.
func racksOf(st *state.State) []Rack {
	used := st.UsedGPUs()
	byRack := map[string][]Node{}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		nd := Node{ID: id, Health: n.Health.String(), GPUType: n.GPUType, GPUs: n.GPUs, Used: used[id], Slots: make([]string, max(n.GPUs, 0))}
		rack := cmp.Or(n.Rack, topology.DefaultDomain)
		byRack[rack] = append(byRack[rack], nd)
	}
	idx := map[string]int{} // next free GPU per node
	nodeAt := map[string]*Node{}
	for rack := range byRack {
		for i := range byRack[rack] {
			nodeAt[byRack[rack][i].ID] = &byRack[rack][i]
		}
	}
	for _, jid := range st.JobIDs() {
		for _, sl := range st.Allocation.Jobs[jid] {
			nd := nodeAt[sl.Node]
			if nd == nil {
				continue
			}
			for g := 0; g < sl.GPUs; g++ {
				i := idx[sl.Node]
				if i >= len(nd.Slots) {
					// More GPUs allocated than the node has: shown as
					// extra cells, never hidden.
					nd.Slots = append(nd.Slots, jid)
				} else {
					nd.Slots[i] = jid
				}
				idx[sl.Node]++
			}
		}
	}
	var out []Rack
	for _, name := range slices.Sorted(maps.Keys(byRack)) {
		out = append(out, Rack{Name: name, Nodes: byRack[name]})
	}
	return out
}

// fitPoints is how many points each fitted curve has.
const fitPoints = 40

// detailOf builds job id's page from st and its gradient history.
func detailOf(st *state.State, id string, hist []GradPoint, now float64, bases *baseCache) (JobDetail, bool) {
	j := st.Jobs[id]
	if j == nil {
		return JobDetail{}, false
	}
	var aj api.Job
	for _, x := range api.JobsOf(st) {
		if x.ID == id {
			aj = x
		}
	}
	aj.Profiled = nil
	d := JobDetail{Job: jobOf(j, aj, bases), Limits: j.Spec.Limits, Profile: []ProfilePoint{}, Fit: []FitCurve{},
		Speedups: []SpeedupPoint{}, GradHistory: hist}
	if d.GradHistory == nil {
		d.GradHistory = []GradPoint{}
	}
	if grad, ok := gradOf(j); ok {
		g := gradPoint(now, grad, j.Spec.Limits.InitBatch)
		d.Grad = &g
	}
	if bj := j.Bid; bj.Version > 0 {
		for _, c := range bj.Single {
			d.Single = append(d.Single, api.ChoiceJSON{LocalBatch: c.LocalBatch, AccumSteps: c.AccumSteps, Gain: finite(c.Gain)})
		}
		for _, c := range bj.Multi {
			d.Multi = append(d.Multi, api.ChoiceJSON{LocalBatch: c.LocalBatch, AccumSteps: c.AccumSteps, Gain: finite(c.Gain)})
		}
	}
	md := j.Bid.Model(j.Spec.Limits)
	if md != nil {
		p := md.Params
		d.Model = &p
	}
	type shape struct {
		typ  string
		n, k int
	}
	var shapes []shape
	for _, e := range j.Profile {
		pp := ProfilePoint{ProfilePoint: e.ProfilePoint, Count: e.Count, GPUType: e.GPUType}
		if e.StepTime > 0 {
			pp.Throughput = finite(float64(e.Replicas*e.LocalBatch) / e.StepTime)
		}
		if md != nil {
			// Each measurement against the model of its own GPU type.
			pp.Fitted = finite(modelOn(j, e.GPUType, md).Params.ThroughputRacks(max(e.Racks, 1), e.Nodes, e.Replicas, float64(e.LocalBatch), 0))
		}
		d.Profile = append(d.Profile, pp)
		if s := (shape{e.GPUType, e.Nodes, e.Replicas}); !slices.Contains(shapes, s) {
			shapes = append(shapes, s)
		}
	}
	if md == nil {
		return d, true
	}
	lo, hi := max(j.Spec.Limits.MinLocal, 1), max(j.Spec.Limits.MaxLocal, 1)
	for _, e := range j.Profile {
		lo, hi = min(lo, e.LocalBatch), max(hi, e.LocalBatch)
	}
	for _, s := range shapes {
		c := FitCurve{GPUType: s.typ, Nodes: s.n, Replicas: s.k}
		p := modelOn(j, s.typ, md).Params
		for i := range fitPoints {
			m := float64(lo) * math.Pow(float64(hi)/float64(lo), float64(i)/float64(fitPoints-1))
			c.Points = append(c.Points, [2]float64{m, finite(p.Throughput(s.n, s.k, m, 0))})
		}
		d.Fit = append(d.Fit, c)
	}
	d.Speedups, _ = speedupsOf(j, &j.Bid, md)
	for i := range j.Bid.Types {
		tb := &j.Bid.Types[i]
		tm := j.Bid.TypeModel(tb.GPUType, j.Spec.Limits)
		if tm == nil {
			continue
		}
		if pts, one := speedupsOf(j, &state.Bid{Single: tb.Single, Multi: tb.Multi}, tm); one > 0 {
			d.TypeSpeedups = append(d.TypeSpeedups, TypeSpeedups{GPUType: tb.GPUType, OneGPU: finite(one), Points: pts})
		}
	}
	return d, true
}

// modelOn is j's model on GPU type typ: the one its bid fitted there, or
// md (its top-level model) when it has none.
func modelOn(j *state.Job, typ string, md *goodput.Model) *goodput.Model {
	if tm := j.Bid.TypeModel(typ, j.Spec.Limits); tm != nil {
		return tm
	}
	return md
}

// speedupsOf is the goodput speedup by md of the batch choices of b for
// 1..K replicas over md's best on one GPU, and that best (0: none, and
// no points).
func speedupsOf(j *state.Job, b *state.Bid, md *goodput.Model) ([]SpeedupPoint, float64) {
	pts := []SpeedupPoint{}
	one, err := md.Optimize(1, 1)
	if err != nil || !(one.Goodput > 0) {
		return pts, 0
	}
	most := max(len(b.Single), len(b.Multi), j.Spec.MaxReplicas)
	for k := 1; k <= min(most, 64); k++ {
		sp := SpeedupPoint{Replicas: k}
		if c, ok := b.Choice(1, k); ok {
			sp.Single = finite(md.Goodput(1, k, c.LocalBatch, c.AccumSteps) / one.Goodput)
		}
		if k > 1 {
			if c, ok := b.Choice(2, k); ok {
				sp.Multi = finite(md.Goodput(2, k, c.LocalBatch, c.AccumSteps) / one.Goodput)
			}
		}
		if sp.Single > 0 || sp.Multi > 0 {
			pts = append(pts, sp)
		}
	}
	return pts, one.Goodput
}
