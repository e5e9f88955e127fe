package allocator

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/optimizer/goodput"
	"pollux/optimizer/topology"
)

// Stats counts what the allocator took in and dropped, for metrics.
type Stats struct {
	// Bids received from job actors; BidsDropped of them were refused
	// (malformed or absurd, of an unknown or finished job, of a stale
	// incarnation or session).
	Bids, BidsDropped atomic.Int64
	// RoundDrops counts round entries the state machine dropped.
	RoundDrops atomic.Int64
}

// bidState is the latest bid message of one job and what it holds,
// checked.
type bidState struct {
	session uint64
	msg     *pb.Bid
	bid     *state.Bid // nil when the message carries no new bid
}

// bid takes one bid message from a job actor. It is kept (the latest per
// job, from the newest session) for the next round; a done or failed
// incarnation is acted on at once.
func (a *allocator) bid(ctx actor.Context, m *pb.Bid) {
	a.cfg.Stats.Bids.Add(1)
	if a.term == 0 {
		return // not leading: the actor resends to whoever leads
	}
	drop := func(format string, args ...any) {
		a.cfg.Stats.BidsDropped.Add(1)
		a.cfg.Logger.Warn("allocator: bid dropped", "job", m.GetJob(), "session", m.GetSession(), "reason", fmt.Sprintf(format, args...))
	}
	j, _ := a.cfg.Store.LocalJob(m.Job)
	switch {
	case j == nil:
		drop("unknown job")
		return
	case j.State.Terminal():
		drop("job is %v", j.State)
		return
	case m.Incarnation != j.Incarnation:
		drop("incarnation %d, current is %d", m.Incarnation, j.Incarnation)
		return
	case m.Session < j.MeasSession || m.Session < j.Bid.Session:
		drop("session %d, the state has %d", m.Session, max(j.MeasSession, j.Bid.Session))
		return
	}
	if prev := a.bids[m.Job]; prev != nil && m.Session < prev.session {
		drop("session %d, a newer actor bids with %d", m.Session, prev.session)
		return
	}
	st := &bidState{session: m.Session, msg: m}
	if len(m.Single) > 0 {
		b, err := bidOf(m)
		if err == nil {
			err = state.CheckBid(j, b)
		}
		if err != nil {
			drop("%v", err)
			return
		}
		if b.Session > j.Bid.Session || b.Version > j.Bid.Version {
			st.bid = b
		}
	}
	if err := checkMeasurements(m.Unacked); err != nil {
		drop("%v", err)
		return
	}
	first := j.State == state.Pending && j.Bid.Version == 0 && a.bids[m.Job] == nil && st.bid != nil
	a.bids[m.Job] = st
	switch {
	case m.Done:
		if a.doneByRankZero(m.Job, m.Incarnation, m.DoneToken, "job actor "+m.Job) {
			a.finish(m.Job, m.Incarnation, state.Completed, "")
		}
	case m.Failed:
		a.fail(m.Job, m.Incarnation, m.Failure)
	}
	if first {
		a.soon(ctx) // a new job can be placed now that it has bid
	}
}

// bidOf converts a bid message.
func bidOf(m *pb.Bid) (*state.Bid, error) {
	b := &state.Bid{Session: m.Session, Version: m.Version, HasModel: m.HasModel, HasGrad: m.HasGrad,
		Grad: goodput.GradStats{GradSqr: m.GradSqr, GradVar: m.GradVar}, MostProfiled: int(m.MostProfiled), RestartDelay: m.RestartDelay}
	if m.HasModel {
		if len(m.Params) != 7 {
			return nil, fmt.Errorf("%w: %d model parameters", state.ErrInvalid, len(m.Params))
		}
		b.Params = goodput.ParamsFrom([7]float64(m.Params))
		b.Params.AlphaX = m.AlphaX
	}
	var err error
	if b.Single, b.Multi, err = tablesOf(m.Single, m.Multi); err != nil {
		return nil, err
	}
	if len(m.Types) > 0 {
		b.Types = make([]state.TypeBid, 0, len(m.Types))
	}
	for _, t := range m.Types {
		if len(t.Params) != 7 {
			return nil, fmt.Errorf("%w: GPU type %q: %d model parameters", state.ErrInvalid, t.GpuType, len(t.Params))
		}
		tb := state.TypeBid{GPUType: t.GpuType, Params: goodput.ParamsFrom([7]float64(t.Params)), MostProfiled: int(t.MostProfiled)}
		tb.Params.AlphaX = t.AlphaX
		if tb.Single, tb.Multi, err = tablesOf(t.Single, t.Multi); err != nil {
			return nil, err
		}
		b.Types = append(b.Types, tb)
	}
	return b, b.Validate()
}

// tablesOf converts a bid message's tables.
func tablesOf(single, multi []*pb.BatchChoice) (s, m []state.BatchChoice, err error) {
	if len(single) > state.MaxBidReplicas || len(multi) > state.MaxBidReplicas {
		return nil, nil, fmt.Errorf("%w: tables of %d and %d shapes", state.ErrInvalid, len(single), len(multi))
	}
	for _, t := range []struct {
		in  []*pb.BatchChoice
		out *[]state.BatchChoice
	}{{single, &s}, {multi, &m}} {
		for _, c := range t.in {
			if c.LocalBsz > math.MaxInt32 || c.AccumSteps > math.MaxInt32 {
				return nil, nil, fmt.Errorf("%w: batch choice %v", state.ErrInvalid, c)
			}
			*t.out = append(*t.out, state.BatchChoice{LocalBatch: int(c.LocalBsz), AccumSteps: int(c.AccumSteps), Gain: c.Gain})
		}
	}
	return s, m, nil
}

// checkMeasurements checks the numbers of a bid's measurements.
func checkMeasurements(ms []*pb.Measurement) error {
	for i, m := range ms {
		if i > 0 && m.Seq <= ms[i-1].Seq {
			return fmt.Errorf("%w: measurements out of order", state.ErrInvalid)
		}
		if !(m.Progress >= 0) || math.IsInf(m.Progress, 0) {
			return fmt.Errorf("%w: progress %v", state.ErrInvalid, m.Progress)
		}
		if !(m.CheckpointAt >= 0) || math.IsInf(m.CheckpointAt, 0) || !(m.CheckpointProgress >= 0) || math.IsInf(m.CheckpointProgress, 0) ||
			(m.CheckpointAt == 0 && (m.CheckpointEpoch != 0 || m.CheckpointProgress != 0)) {
			return fmt.Errorf("%w: measurement %d checkpoint at %v (epoch %d, progress %v)", state.ErrInvalid, m.Seq, m.CheckpointAt, m.CheckpointEpoch, m.CheckpointProgress)
		}
		if len(m.Profile) > 256 {
			return fmt.Errorf("%w: %d profile points in one measurement", state.ErrInvalid, len(m.Profile))
		}
		if m.GpuType != "" {
			if err := topology.CheckName("GPU type", m.GpuType); err != nil {
				return fmt.Errorf("%w: measurement %d: %w", state.ErrInvalid, m.Seq, err)
			}
		}
		for _, p := range m.Profile {
			e := profileEntry(p)
			if err := e.ProfilePoint.Validate(); err != nil || e.Count == 0 || e.Count > 1<<40 ||
				e.AccumTime > 3600 || e.StepTime > 3600 || e.Racks == 1 {
				return fmt.Errorf("%w: profile point %v", state.ErrInvalid, p)
			}
		}
	}
	return nil
}

func profileEntry(p *pb.ProfilePoint) state.ProfileEntry {
	return state.ProfileEntry{ProfilePoint: goodput.ProfilePoint{Nodes: int(p.Nodes), Replicas: int(p.Replicas),
		LocalBatch: int(p.LocalBsz), AccumTime: p.AccumTime, StepTime: p.StepTime, Racks: int(min(p.Racks, 1<<20))}, Count: p.Count}
}

// finish completes (or fails) a job's incarnation at once: a rare event,
// its own Raft write; a completion carries the job's last measurement.
func (a *allocator) finish(job string, inc uint64, end state.JobState, reason string) {
	key := incKey{job, inc}
	if a.finishing[key] {
		return
	}
	a.finishing[key] = true
	if a.plant.dropCompletion(a, job, end) {
		return
	}
	var meas *state.Measurement
	if end == state.Completed {
		meas = a.lastMeasurement(job)
	}
	c, cancel := a.raftContext()
	defer cancel()
	err := a.cfg.Store.FinishJob(c, state.FinishJob{ID: job, Incarnation: inc, State: end, Reason: reason,
		Time: float64(a.cfg.Now().UnixNano()) / 1e9, Meas: meas})
	switch {
	case err == nil:
		a.cfg.Logger.Info("allocator: job finished", "job", job, "incarnation", inc, "state", end)
	case errors.Is(err, state.ErrJobFinished), errors.Is(err, state.ErrStaleIncarnation):
	default:
		delete(a.finishing, key) // retried on the next report of it
		a.cfg.Logger.Warn("allocator: finishing job", "job", job, "err", err)
	}
}

// lastMeasurement is what the job actor's latest bid message holds
// beyond the measurements the state acknowledges (nil: nothing): the
// measurement a completion commits with it, so that the job's last
// epochs are not lost with its last round.
func (a *allocator) lastMeasurement(job string) *state.Measurement {
	bs := a.bids[job]
	if bs == nil {
		return nil
	}
	st := a.cfg.Store.LocalState()
	j := st.Jobs[job]
	if j == nil || j.State.Terminal() {
		return nil
	}
	m, _ := measurement(j, bs, placementType(st, st.Allocation.Jobs[job]))
	return m
}

// fail notes a failed incarnation: the next round restarts it.
func (a *allocator) fail(job string, inc uint64, reason string) {
	if f, ok := a.failed[job]; ok && f.inc >= inc {
		return
	}
	a.failed[job] = failure{inc: inc, reason: reason}
	a.cfg.Logger.Warn("allocator: workers failed", "job", job, "incarnation", inc, "reason", reason)
}

// updates are this round's per-job changes: the new bids, the
// measurements that continue each job's acknowledged sequence, the
// failed incarnations. It also returns the bids the round decides on.
func (a *allocator) updates(st *state.State) ([]state.RoundJob, map[string]*state.Bid) {
	bids := map[string]*state.Bid{}
	var out []state.RoundJob
	for _, id := range st.JobIDs() {
		j := st.Jobs[id]
		if j.State.Terminal() {
			delete(a.bids, id)
			delete(a.failed, id)
			continue
		}
		u := state.RoundJob{ID: id, Incarnation: j.Incarnation}
		if f, ok := a.failed[id]; ok {
			if f.inc == j.Incarnation {
				u.Restart = true
			}
			delete(a.failed, id)
		}
		if bs := a.bids[id]; bs != nil {
			if bs.bid != nil && state.CheckBid(j, bs.bid) == nil &&
				(bs.bid.Session > j.Bid.Session || bs.bid.Version > j.Bid.Version) {
				u.HasBid, u.Bid = true, *bs.bid
				bids[id] = bs.bid
			}
			if m, running := measurement(j, bs, placementType(st, st.Allocation.Jobs[id])); m != nil {
				u.HasMeas, u.Meas = true, *m
				u.Running = running
			}
		}
		if u.Restart || u.Running || u.HasBid || u.HasMeas {
			out = append(out, u)
		}
	}
	for id := range a.bids {
		if st.Jobs[id] == nil {
			delete(a.bids, id)
		}
	}
	return out, bids
}

// measurement sums the measurements of bs that continue j's acknowledged
// sequence (contiguously); only those of j's current incarnation on GPU
// type typ (the type of its placement, which the incarnation's number
// fixes) carry data, the others are merely consumed. The sum is recorded
// under typ. running is set when some carry data.
func measurement(j *state.Job, bs *bidState, typ string) (*state.Measurement, bool) {
	base := uint64(0)
	switch {
	case bs.session == j.MeasSession:
		base = j.MeasSeq
	case bs.session < j.MeasSession:
		return nil, false
	}
	m := &state.Measurement{Session: bs.session, From: base, To: base, GPUType: typ}
	sums := map[[4]int]*state.ProfileEntry{}
	running := false
	for _, d := range bs.msg.Unacked {
		if d.Seq <= m.To {
			continue
		}
		if d.Seq != m.To+1 {
			break // a gap: wait for the actor to resend
		}
		m.To = d.Seq
		// (an actor that names no type predates typed measurements: the
		// placement's type is the incarnation's all the same)
		if d.Incarnation != j.Incarnation || (d.GpuType != "" && d.GpuType != typ) {
			continue
		}
		running = true
		m.Epoch, m.Progress = max(m.Epoch, int(d.Epoch)), max(m.Progress, d.Progress)
		if d.CheckpointAt > m.Checkpoint.Time {
			m.Checkpoint = state.Checkpoint{Incarnation: d.Incarnation, Epoch: int(d.CheckpointEpoch), Progress: d.CheckpointProgress, Time: d.CheckpointAt}
		}
		for _, p := range d.Profile {
			e := profileEntry(p)
			key := [4]int{e.Nodes, e.Replicas, e.LocalBatch, e.Racks}
			s := sums[key]
			if s == nil {
				s = &state.ProfileEntry{ProfilePoint: e.ProfilePoint}
				s.AccumTime, s.StepTime = 0, 0
				sums[key] = s
			}
			s.AccumTime += e.AccumTime * float64(e.Count)
			s.StepTime += e.StepTime * float64(e.Count)
			s.Count += e.Count
		}
	}
	if m.To == m.From {
		return nil, false
	}
	for _, key := range slices.SortedFunc(maps.Keys(sums), func(x, y [4]int) int { return slices.Compare(x[:], y[:]) }) {
		s := sums[key]
		s.AccumTime /= float64(s.Count)
		s.StepTime /= float64(s.Count)
		m.Profile = append(m.Profile, *s)
	}
	return m, running
}

// committed notes what a committed round dropped.
func (a *allocator) committed(res consensus.Result) {
	a.cfg.Stats.RoundDrops.Add(int64(len(res.Dropped)))
	for _, d := range res.Dropped {
		a.cfg.Logger.Info("allocator: round entry dropped", "job", d.Job, "node", d.Node, "placement", d.Placement, "err", d.Err)
	}
}
