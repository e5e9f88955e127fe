package control

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus"
	"pollux/optimizer/goodput"
)

// flushEvery is how often a job actor writes what its workers reported.
const flushEvery = time.Second

// leaderLease is how long a confirmed leadership lets a job actor accept
// reports without asking a quorum again. A server paused for longer (and
// so possibly deposed) re-confirms before it accepts what queued up.
const leaderLease = 100 * time.Millisecond

// Messages between the allocator actor and its job actors (local only).
type (
	// jobPlan tells a job actor the configuration of its current
	// incarnation.
	jobPlan struct {
		// term is the allocator's term: reports are accepted only while
		// this server still leads in it.
		term        uint64
		incarnation uint64
		nodes, reps int
		// epoch and progress are the replicated ones: what the job
		// records never goes below them (a worker restored from an
		// older checkpoint catches up first).
		epoch    int
		progress float64
	}
	// jobFailed tells the allocator that an incarnation's workers failed:
	// the job is taken off its GPUs for a round so that it restarts under
	// a new incarnation.
	jobFailed struct {
		id          string
		incarnation uint64
	}
	// jobFinished tells the allocator the job completed.
	jobFinished struct{ id string }
	// flushNow asks a job actor to write what it holds and answer, so a
	// round decides on the freshest profile and no measurement of an
	// incarnation is refused once the round has replaced it.
	flushNow  struct{}
	flushTick struct{}
)

type profileSum struct {
	accum, step float64
	count       uint64
}

// jobActor is the owner of one job's workers on the leader.
type jobActor struct {
	id    string
	store Store
	now   func() time.Time
	log   *slog.Logger

	plan    jobPlan
	sums    map[[3]int]*profileSum
	grad    goodput.GradStats
	hasGrad bool
	epoch   int
	prog    float64
	moved   bool // epoch/progress changed since the last flush
	// started is set once the current incarnation has reported: the
	// next flush records the job as running (no longer rescaling).
	started, announced bool
	exited             map[uint32]bool
	done               bool
	timer              *time.Timer
	// verified is when a quorum last confirmed this server leads in
	// plan.term.
	verified time.Time
}

func newJobActor(id string, store Store, now func() time.Time, log *slog.Logger) *jobActor {
	return &jobActor{id: id, store: store, now: now, log: log.With("job", id), sums: map[[3]int]*profileSum{}, exited: map[uint32]bool{}}
}

func (j *jobActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		self, sys := ctx.Self(), ctx.ActorSystem()
		j.timer = time.AfterFunc(flushEvery, func() { sys.Root.Send(self, flushTick{}) })
	case *actor.Stopping:
		j.timer.Stop()
		j.flush()
	case flushTick:
		j.flush()
		j.timer.Reset(flushEvery)
	case flushNow:
		j.flush()
		ctx.Respond(true)
	case jobPlan:
		if m.incarnation != j.plan.incarnation {
			j.flush()
			clear(j.sums)
			clear(j.exited)
			j.started, j.announced = false, false
		}
		if m.term != j.plan.term {
			j.verified = time.Time{}
		}
		j.plan = m
		j.epoch, j.prog = max(j.epoch, m.epoch), max(j.prog, m.progress)
	case *pb.WorkerReport:
		j.report(ctx, m)
	case *pb.WorkerExited:
		j.exit(ctx, m)
	}
}

// leading reports whether this server still leads in the plan's term,
// asking a quorum when the last confirmation is older than leaderLease. A
// deposed leader that resumes after a pause must not accept the reports
// that queued up meanwhile: a newer incarnation may already run elsewhere.
func (j *jobActor) leading() bool {
	now := j.now()
	if !j.verified.IsZero() && now.Sub(j.verified) < leaderLease && now.Sub(j.verified) >= 0 {
		return true
	}
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	term, err := j.store.VerifyLeader(c)
	if err != nil || term != j.plan.term {
		j.verified = time.Time{}
		j.log.Debug("control: not leading the plan's term: report dropped", "term", term, "plan_term", j.plan.term, "err", err)
		return false
	}
	j.verified = now
	return true
}

func (j *jobActor) report(ctx actor.Context, r *pb.WorkerReport) {
	if r.Incarnation != j.plan.incarnation || j.done || !j.leading() {
		return
	}
	j.started = true
	if r.Rank == 0 {
		key := [3]int{j.plan.nodes, j.plan.reps, int(r.LocalBsz)}
		s := j.sums[key]
		if s == nil {
			s = &profileSum{}
			j.sums[key] = s
		}
		s.accum += max(r.StepTime-r.SyncTime, 1e-6)
		s.step += r.StepTime
		s.count++
	}
	if r.GradSqr > 0 {
		j.grad, j.hasGrad = goodput.GradStats{GradSqr: r.GradSqr, GradVar: r.GradVar}, true
	}
	if int(r.Epoch) > j.epoch || r.Progress > j.prog {
		j.epoch, j.prog, j.moved = max(j.epoch, int(r.Epoch)), max(j.prog, r.Progress), true
	}
	if r.Done {
		j.done = true
		j.flush()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Fenced by the incarnation: if a round has replaced it since, the
		// new incarnation's workers report their own completion.
		err := j.store.CompleteJob(c, j.id, j.plan.incarnation, false, "", float64(j.now().UnixNano())/1e9)
		if errors.Is(err, consensus.ErrStaleIncarnation) {
			j.log.Info("control: completion of a replaced incarnation refused", "incarnation", j.plan.incarnation)
			j.done = false
			return
		}
		if err != nil && !errors.Is(err, consensus.ErrJobFinished) {
			j.log.Error("control: completing job", "err", err)
			j.done = false // a later report retries
			return
		}
		j.log.Info("control: job completed", "epoch", j.epoch)
		ctx.Send(ctx.Parent(), jobFinished{id: j.id})
	}
}

func (j *jobActor) exit(ctx actor.Context, e *pb.WorkerExited) {
	if e.Incarnation != j.plan.incarnation || e.Requested || j.done {
		return
	}
	if e.ExitCode == 0 && e.Signal == "" && e.Error == "" {
		j.exited[e.Rank] = true
		if len(j.exited) < j.plan.reps {
			return // the others (rank 0 with its done report) are still going
		}
	}
	j.log.Warn("control: workers failed", "incarnation", e.Incarnation, "node", e.Node, "rank", e.Rank,
		"code", e.ExitCode, "signal", e.Signal, "err", e.Error)
	ctx.Send(ctx.Parent(), jobFailed{id: j.id, incarnation: e.Incarnation})
}

// flush writes the aggregated profile, gradient statistics and progress.
func (j *jobActor) flush() {
	announce := j.started && !j.announced
	if len(j.sums) == 0 && !j.moved && !announce {
		return
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(j.sums) > 0 {
		rp := consensus.RecordProfile{ID: j.id, Incarnation: j.plan.incarnation, Grad: j.grad, HasGrad: j.hasGrad}
		for _, key := range slices.SortedFunc(maps.Keys(j.sums), compareKeys) {
			s := j.sums[key]
			n := float64(s.count)
			rp.Entries = append(rp.Entries, consensus.ProfileEntry{
				ProfilePoint: goodput.ProfilePoint{Nodes: key[0], Replicas: key[1], LocalBatch: key[2], AccumTime: s.accum / n, StepTime: s.step / n},
				Count:        s.count,
			})
		}
		if err := j.store.RecordProfile(c, rp); err != nil {
			j.logWrite("control: recording profile", err)
		}
		clear(j.sums)
	}
	if j.moved || announce {
		u := consensus.UpdateJob{ID: j.id, Incarnation: j.plan.incarnation,
			Set: consensus.UpdateEpoch | consensus.UpdateProgress, Epoch: j.epoch, Progress: j.prog}
		if announce && !j.done {
			u.Set |= consensus.UpdateState
			u.State = consensus.Running
		}
		if err := j.store.UpdateJob(c, u); err != nil {
			j.logWrite("control: recording progress", err)
		} else {
			j.announced = j.announced || announce
		}
		j.moved = false
	}
}

// logWrite logs a failed write; a write refused because a round has just
// replaced the incarnation (measurements made between the round's flush
// and its commit) is expected and dropped quietly.
func (j *jobActor) logWrite(msg string, err error) {
	if errors.Is(err, consensus.ErrStaleIncarnation) {
		j.log.Debug(msg, "err", err)
		return
	}
	j.log.Warn(msg, "err", err)
}

func compareKeys(a, b [3]int) int {
	for i := range a {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return 0
}
