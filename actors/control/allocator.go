package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/node"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/consensus"
	"pollux/optimizer"
)

// AllocatorName is the name the allocator actor is spawned under.
const AllocatorName = "allocator"

// DefaultInterval is the scheduling interval.
const DefaultInterval = 60 * time.Second

// Config configures the allocator actor of one server.
type Config struct {
	Store Store
	// Members lists the cluster's members; agents among them are
	// registered as nodes, and registered nodes missing from it are
	// marked dead. Nil skips the reconciliation (nodes registered by
	// other means).
	Members Members
	// NodeGrace is how long a registered agent must be missing from the
	// membership before it is marked dead (default 3 s): gossip can
	// declare a busy but healthy machine dead for a moment, and marking
	// it dead would restart every job on it.
	NodeGrace time.Duration
	// Policy decides allocations (default optimizer.NewPollux()).
	Policy optimizer.Policy
	// Interval between rounds (default 60 s).
	Interval time.Duration
	// CheckpointRoot holds the checkpoints of jobs whose spec names no
	// directory.
	CheckpointRoot string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TimeScale is emulated seconds per real second (default 1): job ages
	// and attained service are counted in emulated time, like the
	// emulated workers' progress.
	TimeScale float64
	// MaxFailures is how many incarnations of a job in a row may fail
	// without the job finishing an epoch before it is marked Failed
	// (default 5; negative: retry forever).
	MaxFailures int
	// Seed starts the sequence of per-round seeds.
	Seed   uint64
	Logger *slog.Logger
}

// RoundInfo describes the last round, for status and metrics.
type RoundInfo struct {
	Term       uint64
	Generation uint64
	Jobs       int
	GPUsUsed   int
	Fitness    float64
	Duration   time.Duration
	Committed  bool
}

// Observer, if set on the allocator, is told about every round.
type Observer func(RoundInfo)

type roundTick struct{}

// crashRecord counts a job's failed incarnations in a row: a failure after
// the job finished an epoch starts the count again.
type crashRecord struct {
	incarnation uint64
	epoch       int
	count       int
}

// NewAllocator returns the props of the allocator actor. observe may be
// nil.
func NewAllocator(cfg Config, observe Observer) (*actor.Props, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: no store", ErrConfig)
	}
	if cfg.Policy == nil {
		cfg.Policy = optimizer.NewPollux()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = 5
	}
	if cfg.NodeGrace <= 0 {
		cfg.NodeGrace = 3 * time.Second
	}
	if !(cfg.TimeScale > 0) {
		cfg.TimeScale = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &allocator{cfg: cfg, observe: observe, models: NewModels(), jobs: map[string]*actor.PID{},
			failed: map[string]uint64{}, crashes: map[string]*crashRecord{}, missing: map[string]time.Time{}}
	}), nil
}

type allocator struct {
	cfg     Config
	observe Observer
	models  *Models

	term      uint64 // the term this allocator leads in; 0 when not leading
	prev      *optimizer.State
	lastRound time.Time
	seed      uint64
	jobs      map[string]*actor.PID // job actors
	failed    map[string]uint64     // job -> incarnation whose workers failed
	crashes   map[string]*crashRecord
	missing   map[string]time.Time // node -> since when it is missing from the membership
	timer     *time.Timer
}

func (a *allocator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.seed = a.cfg.Seed
		self, sys := ctx.Self(), ctx.ActorSystem()
		a.timer = time.AfterFunc(min(a.cfg.Interval, 100*time.Millisecond), func() { sys.Root.Send(self, roundTick{}) })
	case *actor.Stopping:
		a.timer.Stop()
	case roundTick:
		a.round(ctx)
		a.timer.Reset(a.cfg.Interval)
	case *pb.AssignAck:
		if !m.Ok {
			a.cfg.Logger.Warn("control: node refused assignment", "err", m.Error, "node_generation", m.Generation)
		}
	case jobFailed:
		a.failed[m.id] = m.incarnation
	case jobFinished:
		if pid := a.jobs[m.id]; pid != nil {
			_ = ctx.StopFuture(pid).Wait()
			delete(a.jobs, m.id)
		}
	}
}

// round runs one scheduling round if this server leads.
func (a *allocator) round(ctx actor.Context) {
	term, leader := a.cfg.Store.Leadership()
	a.cfg.Logger.Debug("control: round", "term", term, "leader", leader)
	if !leader {
		if a.term != 0 {
			a.cfg.Logger.Info("control: no longer leading", "term", a.term)
			a.stepDown(ctx)
		}
		return
	}
	begin := time.Now()
	if term == a.term {
		for _, id := range slices.Sorted(maps.Keys(a.jobs)) {
			if _, err := ctx.RequestFuture(a.jobs[id], flushNow{}, 5*time.Second).Result(); err != nil {
				a.cfg.Logger.Warn("control: job actor did not flush", "job", id, "err", err)
			}
		}
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.cfg.Store.Read(c)
	if err != nil {
		a.cfg.Logger.Warn("control: reading state", "err", err)
		return
	}
	if term != a.term {
		// A new leadership: start from the replicated state alone, and
		// re-send the desired state before deciding anything new.
		a.stepDown(ctx)
		a.term = term
		a.cfg.Logger.Info("control: leading, reconciling", "term", term, "generation", st.Allocation.Generation)
		a.syncJobs(ctx, st)
		a.send(ctx, st)
	}
	if a.reconcileMembers(c, st) {
		if st, err = a.cfg.Store.Read(c); err != nil {
			a.cfg.Logger.Warn("control: reading state", "err", err)
			return
		}
	}
	now := a.cfg.Now()
	a.accrue(c, st, now)
	for id, inc := range a.failed {
		if j := st.Jobs[id]; j == nil || j.Incarnation != inc || j.State.Terminal() {
			delete(a.failed, id)
		}
	}
	for id := range a.crashes {
		if j := st.Jobs[id]; j == nil || j.State.Terminal() {
			delete(a.crashes, id)
		}
	}
	if a.failCrashLoops(ctx, c, st, now) {
		if st, err = a.cfg.Store.Read(c); err != nil {
			a.cfg.Logger.Warn("control: reading state", "err", err)
			return
		}
	}
	a.seed++
	snap, err := BuildSnapshot(st, a.models, float64(now.UnixNano())/1e9, a.cfg.TimeScale, a.seed, setOf(a.failed))
	if err != nil {
		a.cfg.Logger.Error("control: building snapshot", "err", err)
		return
	}
	a.models.Forget(st.Jobs)
	info := RoundInfo{Term: term, Generation: st.Allocation.Generation, Jobs: len(snap.Jobs)}
	slots := map[string][]consensus.Slot{}
	if len(snap.Jobs) > 0 && len(snap.Nodes) > 0 {
		res, err := a.cfg.Policy.Allocate(snap, a.prev)
		if err != nil {
			a.cfg.Logger.Error("control: policy", "err", err)
			return
		}
		a.prev, info.Fitness = res.State, res.Diagnostics.Fitness
		if slots, err = Slots(snap, res.Placements); err != nil {
			a.cfg.Logger.Error("control: converting allocation", "err", err)
			return
		}
	}
	if !sameAllocation(slots, st.Allocation.Jobs) {
		gen := st.Allocation.Generation + 1
		if err := a.cfg.Store.CommitAllocation(c, gen, term, slots); err != nil {
			a.cfg.Logger.Warn("control: committing allocation", "generation", gen, "err", err)
			return
		}
		info.Committed, info.Generation = true, gen
		if st, err = a.cfg.Store.Read(c); err != nil {
			a.cfg.Logger.Warn("control: reading state", "err", err)
			return
		}
	}
	a.syncJobs(ctx, st)
	a.send(ctx, st)
	for _, g := range st.UsedGPUs() {
		info.GPUsUsed += g
	}
	info.Duration = time.Since(begin)
	if info.Committed {
		a.cfg.Logger.Info("control: allocation committed", "generation", info.Generation, "term", term,
			"jobs", info.Jobs, "gpus_used", info.GPUsUsed, "fitness", info.Fitness, "took", info.Duration)
	}
	if a.observe != nil {
		a.observe(info)
	}
}

// failCrashLoops counts this round's failed incarnations and marks Failed
// every job whose workers failed MaxFailures incarnations in a row without
// finishing an epoch. It reports whether it changed anything.
func (a *allocator) failCrashLoops(ctx actor.Context, c context.Context, st *consensus.State, now time.Time) bool {
	changed := false
	for _, id := range slices.Sorted(maps.Keys(a.failed)) {
		inc, j := a.failed[id], st.Jobs[id]
		rec := a.crashes[id]
		if rec == nil {
			rec = &crashRecord{}
			a.crashes[id] = rec
		}
		if rec.incarnation != inc {
			if j.Epoch > rec.epoch {
				rec.count = 0
			}
			rec.incarnation, rec.epoch = inc, j.Epoch
			rec.count++
		}
		if a.cfg.MaxFailures < 0 || rec.count < a.cfg.MaxFailures {
			continue
		}
		reason := fmt.Sprintf("workers failed in %d incarnations in a row without finishing an epoch", rec.count)
		err := a.cfg.Store.CompleteJob(c, id, 0, true, reason, float64(now.UnixNano())/1e9)
		if err != nil && !errors.Is(err, consensus.ErrJobFinished) {
			a.cfg.Logger.Warn("control: failing a crash-looping job", "job", id, "err", err)
			continue
		}
		a.cfg.Logger.Error("control: job failed", "job", id, "reason", reason)
		delete(a.failed, id)
		delete(a.crashes, id)
		if pid := a.jobs[id]; pid != nil {
			_ = ctx.StopFuture(pid).Wait()
			delete(a.jobs, id)
		}
		changed = true
	}
	return changed
}

// stepDown forgets everything only a leader holds.
func (a *allocator) stepDown(ctx actor.Context) {
	for id, pid := range a.jobs {
		// Wait, so that a job actor respawned under the same name right
		// after does not collide with this one.
		if err := ctx.StopFuture(pid).Wait(); err != nil {
			a.cfg.Logger.Warn("control: stopping job actor", "job", id, "err", err)
		}
		delete(a.jobs, id)
	}
	a.term, a.prev, a.lastRound = 0, nil, time.Time{}
	clear(a.failed)
	clear(a.crashes)
	clear(a.missing)
}

// reconcileMembers registers agents that are members and marks dead the
// registered nodes missing from the membership for NodeGrace. It reports
// whether it changed anything.
func (a *allocator) reconcileMembers(c context.Context, st *consensus.State) bool {
	if a.cfg.Members == nil {
		return false
	}
	changed := false
	seen := map[string]bool{}
	for _, m := range a.cfg.Members() {
		if m.Meta.Role != cluster.RoleAgent {
			continue
		}
		seen[m.Name] = true
		n := st.Nodes[m.Name]
		want := consensus.Node{ID: m.Name, Addresses: []string{m.Meta.ActorAddr}, Rack: m.Meta.Rack, GPUs: m.Meta.GPUs, Health: consensus.Alive}
		if n != nil && n.Health == want.Health && n.GPUs == want.GPUs && n.Rack == want.Rack && slices.Equal(n.Addresses, want.Addresses) {
			continue
		}
		if err := a.cfg.Store.RegisterNode(c, want); err != nil {
			a.cfg.Logger.Warn("control: registering node", "node", m.Name, "err", err)
			continue
		}
		a.cfg.Logger.Info("control: node registered", "node", m.Name, "gpus", want.GPUs, "rack", want.Rack)
		changed = true
	}
	now := time.Now()
	for id := range a.missing {
		if seen[id] {
			delete(a.missing, id)
		}
	}
	for id, n := range st.Nodes {
		if seen[id] || n.Health == consensus.Dead || n.Health == consensus.Left {
			continue
		}
		since, ok := a.missing[id]
		if !ok {
			a.missing[id] = now
			a.cfg.Logger.Info("control: node missing from the membership", "node", id)
			continue
		}
		if now.Sub(since) < a.cfg.NodeGrace {
			continue
		}
		delete(a.missing, id)
		if err := a.cfg.Store.MarkNode(c, id, consensus.Dead); err != nil {
			a.cfg.Logger.Warn("control: marking node dead", "node", id, "err", err)
			continue
		}
		a.cfg.Logger.Warn("control: node gone", "node", id)
		changed = true
	}
	return changed
}

// accrue adds GPU-seconds since the last round to every job holding GPUs.
func (a *allocator) accrue(c context.Context, st *consensus.State, now time.Time) {
	last := a.lastRound
	a.lastRound = now
	if last.IsZero() {
		return
	}
	dt := now.Sub(last).Seconds() * a.cfg.TimeScale
	for _, id := range slices.Sorted(maps.Keys(st.Allocation.Jobs)) {
		j := st.Jobs[id]
		if j == nil || j.State.Terminal() {
			continue
		}
		k := 0
		for _, sl := range st.Allocation.Jobs[id] {
			k += sl.GPUs
		}
		err := a.cfg.Store.UpdateJob(c, consensus.UpdateJob{ID: id, Set: consensus.UpdateAttained, Attained: j.Attained + float64(k)*dt})
		if err != nil {
			a.cfg.Logger.Warn("control: attained service", "job", id, "err", err)
		}
	}
}

// syncJobs spawns a job actor for every job holding GPUs and tells it its
// incarnation's configuration.
func (a *allocator) syncJobs(ctx actor.Context, st *consensus.State) {
	for _, id := range slices.Sorted(maps.Keys(st.Allocation.Jobs)) {
		j := st.Jobs[id]
		slots := st.Allocation.Jobs[id]
		if j == nil || j.State.Terminal() || len(slots) == 0 {
			continue
		}
		pid := a.jobs[id]
		if pid == nil {
			ja := newJobActor(id, a.cfg.Store, a.cfg.Now, a.cfg.Logger)
			var err error
			pid, err = ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return ja }), "job-"+id)
			if err != nil {
				a.cfg.Logger.Error("control: spawning job actor", "job", id, "err", err)
				continue
			}
			a.jobs[id] = pid
		}
		k := 0
		for _, sl := range slots {
			k += sl.GPUs
		}
		ctx.Send(pid, jobPlan{term: a.term, incarnation: j.Incarnation, nodes: len(slots), reps: k, epoch: j.Epoch, progress: j.Progress})
	}
}

// send gives every alive node its desired state.
func (a *allocator) send(ctx actor.Context, st *consensus.State) {
	assign := Assignments(st, AssignOptions{
		CheckpointRoot: a.cfg.CheckpointRoot, Models: a.models,
		Owner: func(job string) *pb.Ref {
			if pid := a.jobs[job]; pid != nil {
				return &pb.Ref{Address: pid.Address, Id: pid.Id}
			}
			return nil
		},
	})
	for _, id := range slices.Sorted(maps.Keys(assign)) {
		n := st.Nodes[id]
		if n == nil || len(n.Addresses) == 0 {
			continue
		}
		ctx.Request(actor.NewPID(n.Addresses[0], node.ActorName), assign[id])
	}
}

func sameAllocation(a, b map[string][]consensus.Slot) bool {
	if len(a) != len(b) {
		return false
	}
	for id, s := range a {
		if !slices.Equal(s, b[id]) {
			return false
		}
	}
	return true
}

func setOf(m map[string]uint64) map[string]bool {
	s := make(map[string]bool, len(m))
	for k := range m {
		s[k] = true
	}
	return s
}
