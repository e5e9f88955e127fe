package job

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
)

// maxUnacked bounds the measurements an actor keeps while the state does
// not acknowledge them (a long leaderless period): past it the oldest
// are dropped (they are measurements; the profile keeps its earlier
// means).
const maxUnacked = 256

// gradChange is the relative change of the gradient statistics that
// makes a new bid (smaller drifts wait for the next refit).
const gradChange = 0.1

type (
	// plan tells a job actor its current incarnation and where to bid.
	plan struct {
		incarnation uint64
		nodes, reps int
		racks       int    // the incarnation's nodes span (0: one)
		gpuType     string // of the incarnation's nodes
		allocator   *actor.PID
	}
	bidTick struct{}
)

type profileKey [4]int // nodes, replicas, local batch, racks (0: one)

type sum struct {
	accum, step float64
	count       uint64
}

// delta is what the actor aggregated from one incarnation's reports
// between two bids: one numbered measurement, of one GPU type.
type delta struct {
	seq, incarnation uint64
	gpuType          string
	sums             map[profileKey]*sum
	epoch            int
	progress         float64
	ckpt             savedCheckpoint // the latest reported (at 0: none)
}

// savedCheckpoint is a checkpoint the workers reported saving.
type savedCheckpoint struct {
	epoch    uint32
	progress float64
	at       float64 // seconds since the Unix epoch
}

func (d *delta) empty() bool {
	return len(d.sums) == 0 && d.epoch == 0 && d.progress == 0 && d.ckpt.at == 0
}

// jobActor owns one job's model on one server.
type jobActor struct {
	id      string
	session uint64
	cfg     *HostConfig
	log     *slog.Logger

	spec   *state.JobSpec // nil until the job is in this server's state
	plan   plan
	timer  *time.Timer
	closed bool // the state has a newer session: another actor took over

	profiles map[string]*typeProfile // by GPU type
	grad     goodput.GradStats       // the latest measured
	bidGrad  goodput.GradStats       // the one the current bid was built with
	hasGrad  bool

	version uint64 // of the bid below, within the session
	bid     state.Bid
	seq     uint64 // last measurement number given
	cur     delta  // being aggregated
	unacked []delta
	epoch   int
	prog    float64
	// lastCkpt is when the latest checkpoint of plan.incarnation that a
	// measurement holds was saved: later reports of it are not new.
	lastCkpt float64

	// lastStep is when rank 0 of plan.incarnation last reported a step
	// (zero: not yet); movedAt is where the current incarnation's delay
	// is measured from while it has not stepped (zero: nothing to
	// measure; see restartFrom). restartDelay is the mean of the delays
	// measured, over restarts of them.
	lastStep, movedAt time.Time
	restartDelay      float64
	restarts          int

	done, failed bool   // of plan.incarnation
	doneToken    string // the report token of rank 0's done report
	failure      string
	reports      uint64
	lastSent     time.Time
}

func newJobActor(id string, session uint64, cfg *HostConfig) *jobActor {
	return &jobActor{id: id, session: session, cfg: cfg, log: cfg.Logger.With("job", id, "session", session),
		profiles: map[string]*typeProfile{}}
}

func (j *jobActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		j.load()
		self, sys := ctx.Self(), ctx.ActorSystem()
		j.timer = time.AfterFunc(j.cfg.BidEvery, func() { sys.Root.Send(self, bidTick{}) })
	case *actor.Stopping:
		j.timer.Stop()
	case plan:
		j.setPlan(ctx, m)
	case bidTick:
		j.tick(ctx, false)
		j.timer.Reset(j.cfg.BidEvery)
	case *pb.WorkerReports:
		for _, r := range m.Reports {
			j.report(ctx, r)
		}
	case *pb.WorkerExited:
		j.exited(ctx, m)
	}
}

// load starts the actor from its server's replicated state: the job's
// spec, profile, progress and bid. It is retried every tick until the
// server has applied the job's submission.
func (j *jobActor) load() {
	if j.spec != nil {
		return
	}
	st, _ := j.cfg.Store.LocalJob(j.id)
	if st == nil {
		return
	}
	spec := st.Spec
	j.spec = &spec
	for _, e := range st.Profile {
		j.profileOf(e.GPUType).entries[profileKey{e.Nodes, e.Replicas, e.LocalBatch, e.Racks}] = e
	}
	j.epoch, j.prog = st.Epoch, st.Progress
	if b := st.Bid; b.Version > 0 {
		// Each type's model starts from its part of the bid; a bid
		// without parts (only untyped measurements, or made before bids
		// had them) holds the untyped model.
		for t, p := range j.profiles {
			switch tb := b.OnType(t); {
			case tb != nil:
				p.params, p.hasModel = tb.Params, true
			case len(b.Types) == 0 && t == "" && b.HasModel:
				p.params, p.hasModel = b.Params, true
			}
		}
		if b.HasGrad {
			j.grad, j.hasGrad = b.Grad, true
		}
		if b.RestartDelay > 0 {
			j.restartDelay, j.restarts = b.RestartDelay, 1
		}
	} else if st.HasGrad {
		j.grad, j.hasGrad = st.Grad, true
	}
	for _, p := range j.profiles {
		p.newConfig = !p.hasModel
	}
}

// profileOf is the job's profile on GPU type t, made if new.
func (j *jobActor) profileOf(t string) *typeProfile {
	p := j.profiles[t]
	if p == nil {
		p = newTypeProfile()
		j.profiles[t] = p
	}
	return p
}

func (j *jobActor) setPlan(ctx actor.Context, p plan) {
	first := j.plan.allocator == nil
	if p.incarnation != j.plan.incarnation {
		j.closeDelta()
		j.done, j.failed, j.failure, j.doneToken = false, false, "", ""
		j.lastCkpt = 0
		j.restartFrom(p, first)
	}
	j.plan = p
	if first {
		j.tick(ctx, true) // bid at once: a job is placed only once it has bid
	}
}

// report takes one worker report of the current incarnation.
func (j *jobActor) report(ctx actor.Context, r *pb.WorkerReport) {
	if r.Incarnation != j.plan.incarnation || j.plan.reps == 0 {
		return
	}
	j.reports++
	j.cfg.Reports.Add(1)
	if j.cur.sums == nil {
		j.cur = delta{incarnation: r.Incarnation, gpuType: j.plan.gpuType, sums: map[profileKey]*sum{}}
	}
	if r.Rank == 0 && r.LocalBsz > 0 {
		j.stepped()
		key := profileKey{j.plan.nodes, j.plan.reps, int(r.LocalBsz), j.plan.racks}
		s := j.cur.sums[key]
		if s == nil {
			s = &sum{}
			j.cur.sums[key] = s
		}
		s.accum += max(r.StepTime-r.SyncTime, 1e-6)
		s.step += r.StepTime
		s.count++
	}
	if r.GradSqr > 0 {
		j.grad, j.hasGrad = goodput.GradStats{GradSqr: r.GradSqr, GradVar: r.GradVar}, true
	}
	j.cur.epoch, j.cur.progress = max(j.cur.epoch, int(r.Epoch)), max(j.cur.progress, r.Progress)
	if r.CheckpointAt > j.cur.ckpt.at && r.CheckpointAt > j.lastCkpt {
		j.cur.ckpt = savedCheckpoint{epoch: r.CheckpointEpoch, progress: r.CheckpointProgress, at: r.CheckpointAt}
	}
	if r.Done && r.Rank == 0 && !j.done {
		j.done, j.doneToken = true, r.Token
		j.log.Info("job: workers report done", "incarnation", r.Incarnation, "epoch", r.Epoch)
		j.tick(ctx, true)
	}
}

// restartFrom starts measuring the delay of incarnation p, which replaces
// the current one: from the current one's last step (or, if it has not
// stepped yet, from where its own delay was measured), or, for workers
// starting from none (the job's first placement, or after a
// preemption: the wait before is not a restart's), from now. A job
// placed nowhere, and the first plan of an actor (it may have taken
// over a running incarnation), measure nothing.
func (j *jobActor) restartFrom(p plan, first bool) {
	switch {
	case p.reps == 0 || first:
		j.movedAt = time.Time{}
	case j.plan.reps > 0 && !j.lastStep.IsZero():
		j.movedAt = j.lastStep
	case j.plan.reps > 0 && !j.movedAt.IsZero():
	default:
		j.movedAt = j.cfg.Now()
	}
	j.lastStep = time.Time{}
}

// stepped notes a step of rank 0 of the current incarnation: the first
// of an incarnation whose delay is being measured (restartFrom) ends the
// measurement.
func (j *jobActor) stepped() {
	now := j.cfg.Now()
	if !j.movedAt.IsZero() {
		d := now.Sub(j.movedAt).Seconds()
		j.movedAt = time.Time{}
		if d > maxRestartDelay {
			j.log.Warn("job: restart delay not taken as one", "incarnation", j.plan.incarnation, "delay_s", d)
			j.lastStep = now
			return
		}
		j.restarts++
		j.restartDelay += (d - j.restartDelay) / float64(j.restarts)
		j.log.Info("job: restart measured", "incarnation", j.plan.incarnation, "delay_s", d, "mean_s", j.restartDelay)
	}
	j.lastStep = now
}

func (j *jobActor) exited(ctx actor.Context, e *pb.WorkerExited) {
	if e.Incarnation != j.plan.incarnation || e.Requested || j.done || j.failed {
		return
	}
	if e.ExitCode == 0 && e.Signal == "" && e.Error == "" {
		return // the leader learns of clean exits without done from the nodes
	}
	j.failed = true
	j.failure = fmt.Sprintf("worker %d on %s exited with code %d", e.Rank, e.Node, e.ExitCode)
	if e.Signal != "" {
		j.failure = fmt.Sprintf("worker %d on %s was killed (%s)", e.Rank, e.Node, e.Signal)
	}
	if e.Error != "" {
		j.failure = fmt.Sprintf("worker %d on %s could not start: %s", e.Rank, e.Node, e.Error)
	}
	j.log.Warn("job: workers failed", "incarnation", e.Incarnation, "node", e.Node, "rank", e.Rank,
		"code", e.ExitCode, "signal", e.Signal, "err", e.Error)
	j.tick(ctx, true)
}

// closeDelta numbers what was aggregated since the last bid and merges it
// into the actor's own profile.
func (j *jobActor) closeDelta() {
	if j.cur.sums == nil || j.cur.empty() {
		j.cur = delta{}
		return
	}
	j.seq++
	j.cur.seq = j.seq
	if len(j.cur.sums) > 0 {
		p := j.profileOf(j.cur.gpuType)
		for key, s := range j.cur.sums {
			e, ok := p.entries[key]
			if !ok {
				p.newConfig = true
				e = state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: key[0], Replicas: key[1], LocalBatch: key[2], Racks: key[3]},
					GPUType: j.cur.gpuType}
			}
			total := e.Count + s.count
			w := float64(s.count) / float64(total)
			e.AccumTime += (s.accum/float64(s.count) - e.AccumTime) * w
			e.StepTime += (s.step/float64(s.count) - e.StepTime) * w
			e.Count = total
			p.entries[key] = e
			p.newCounts = true
		}
	}
	j.epoch, j.prog = max(j.epoch, j.cur.epoch), max(j.prog, j.cur.progress)
	j.lastCkpt = max(j.lastCkpt, j.cur.ckpt.at)
	j.unacked = append(j.unacked, j.cur)
	if len(j.unacked) > maxUnacked {
		j.unacked = slices.Delete(j.unacked, 0, len(j.unacked)-maxUnacked)
	}
	j.cur = delta{}
}

// acknowledge drops the measurements the server's replicated state has
// merged; it reports false once another actor's session has taken over.
func (j *jobActor) acknowledge() bool {
	st, _ := j.cfg.Store.LocalJob(j.id)
	if st == nil {
		return true
	}
	if st.State.Terminal() {
		return false
	}
	switch {
	case st.MeasSession > j.session || st.Bid.Session > j.session:
		if !j.closed {
			j.log.Info("job: a newer actor has taken over", "state_session", max(st.MeasSession, st.Bid.Session))
		}
		j.closed = true
		return false
	case st.MeasSession == j.session:
		j.unacked = slices.DeleteFunc(j.unacked, func(d delta) bool { return d.seq <= st.MeasSeq })
	}
	j.epoch, j.prog = max(j.epoch, st.Epoch), max(j.prog, st.Progress)
	return true
}

// refit fits each GPU type's model when there is new data of that type:
// at once for a new configuration, otherwise at most every RefitEvery.
// It reports whether some model changed enough to bid again.
func (j *jobActor) refit() bool {
	now := j.cfg.Now()
	changed := false
	for _, t := range slices.Sorted(maps.Keys(j.profiles)) {
		p := j.profiles[t]
		if len(p.entries) == 0 || !(p.newConfig || (p.newCounts && now.Sub(p.fitted) >= j.cfg.RefitEvery)) {
			continue
		}
		params, err := p.fit()
		p.fitted, p.newConfig, p.newCounts = now, false, false
		if err != nil {
			j.log.Warn("job: fitting the throughput model", "gpu_type", t, "points", len(p.entries), "err", err)
			continue
		}
		j.cfg.Fits.Add(1)
		changed = changed || !p.hasModel || paramsMoved(p.params, params) > modelChange
		p.params, p.hasModel = params, true
	}
	return changed
}

// modelChange is the relative change of a throughput parameter that makes
// a refit worth a new bid.
const modelChange = 0.01

func paramsMoved(a, b goodput.Params) float64 {
	x, y := a.Slice(), b.Slice()
	most := 0.0
	for i := range x {
		most = math.Max(most, math.Abs(x[i]-y[i])/math.Max(math.Abs(x[i]), 1e-12))
	}
	if a.AlphaX != b.AlphaX {
		// (a term becoming known is a change whatever its size)
		most = math.Max(most, math.Abs(a.AlphaX-b.AlphaX)/math.Max(math.Abs(a.AlphaX), 1e-12))
	}
	return most
}

// maxRestartDelay bounds a restart delay the actor takes as one (seconds,
// the replicated state's bound on a bid's times): a restart that took
// longer was something else (a stalled node, a long wait for a slot).
const maxRestartDelay = 3600

// rebid rebuilds the bid if the model, the gradient statistics, the
// replica bound or the measured restart delay moved; it reports whether
// it did.
func (j *jobActor) rebid(modelChanged bool) bool {
	most := 0
	for _, p := range j.profiles {
		most = max(most, p.mostReplicas())
	}
	gradMoved := j.hasGrad && (j.bid.Version == 0 || !j.bid.HasGrad || relChange(j.grad, j.bidGrad) > gradChange)
	if j.bid.Version > 0 && !modelChanged && !gradMoved && most == j.bid.MostProfiled && j.bid.RestartDelay == j.restartDelay {
		return false
	}
	grad := goodput.GradStats{}
	if j.hasGrad {
		grad = j.grad
	}
	b := bidOn(*j.spec, j.profiles, grad, j.hasGrad)
	b.RestartDelay = j.restartDelay
	j.version++
	b.Session, b.Version = j.session, j.version
	j.bid, j.bidGrad = b, j.grad
	return true
}

// tick closes the current measurement, refits and rebids if due, and
// sends the bid when it carries anything the leader does not have yet
// (urgent: a done or failed incarnation, or the first bid).
func (j *jobActor) tick(ctx actor.Context, urgent bool) {
	j.load()
	if j.spec == nil || j.plan.allocator == nil || !j.acknowledge() {
		return
	}
	before := j.seq
	j.closeDelta()
	changed := j.rebid(j.refit())
	st, _ := j.cfg.Store.LocalJob(j.id)
	bidAcked := st != nil && st.Bid.Session == j.session && st.Bid.Version >= j.bid.Version
	now := j.cfg.Now()
	// What the leader may not have is repeated every other tick: a lost
	// bid costs at most that.
	resend := now.Sub(j.lastSent) >= 2*j.cfg.BidEvery && (len(j.unacked) > 0 || !bidAcked || j.done || j.failed)
	if !urgent && !changed && j.seq == before && !resend {
		return
	}
	msg := &pb.Bid{Job: j.id, Incarnation: j.plan.incarnation, Session: j.session, Version: j.bid.Version,
		Done: j.done, DoneToken: j.doneToken, Failed: j.failed, Failure: j.failure, Reports: j.reports}
	if !bidAcked {
		b := &j.bid
		msg.HasModel, msg.HasGrad = b.HasModel, b.HasGrad
		if b.HasModel {
			p := b.Params.Slice()
			msg.Params, msg.AlphaX = p[:], b.Params.AlphaX
		}
		msg.GradSqr, msg.GradVar, msg.MostProfiled = b.Grad.GradSqr, b.Grad.GradVar, uint32(b.MostProfiled)
		msg.RestartDelay = b.RestartDelay
		msg.Single, msg.Multi = choices(b.Single), choices(b.Multi)
		for _, tb := range b.Types {
			p := tb.Params.Slice()
			msg.Types = append(msg.Types, &pb.TypeBid{GpuType: tb.GPUType, Params: p[:], AlphaX: tb.Params.AlphaX, MostProfiled: uint32(tb.MostProfiled),
				Single: choices(tb.Single), Multi: choices(tb.Multi)})
		}
	}
	for _, d := range j.unacked {
		m := &pb.Measurement{Seq: d.seq, Incarnation: d.incarnation, Epoch: uint32(d.epoch), Progress: d.progress, GpuType: d.gpuType,
			CheckpointEpoch: d.ckpt.epoch, CheckpointProgress: d.ckpt.progress, CheckpointAt: d.ckpt.at}
		for _, key := range slices.SortedFunc(maps.Keys(d.sums), compareKeys) {
			s := d.sums[key]
			n := float64(s.count)
			m.Profile = append(m.Profile, &pb.ProfilePoint{Nodes: uint32(key[0]), Replicas: uint32(key[1]), LocalBsz: uint32(key[2]),
				AccumTime: s.accum / n, StepTime: s.step / n, Count: s.count, Racks: uint32(key[3])})
		}
		msg.Unacked = append(msg.Unacked, m)
	}
	ctx.Send(j.plan.allocator, msg)
	j.lastSent = now
}

func choices(cs []state.BatchChoice) []*pb.BatchChoice {
	out := make([]*pb.BatchChoice, len(cs))
	for i, c := range cs {
		out[i] = &pb.BatchChoice{LocalBsz: uint32(c.LocalBatch), AccumSteps: uint32(c.AccumSteps), Gain: c.Gain}
	}
	return out
}

func relChange(a, b goodput.GradStats) float64 {
	d := math.Abs(a.GradSqr-b.GradSqr)/math.Max(math.Abs(b.GradSqr), 1e-12) +
		math.Abs(a.GradVar-b.GradVar)/math.Max(math.Abs(b.GradVar), 1e-12)
	return d
}
