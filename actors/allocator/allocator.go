package allocator

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/fedlink"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/consensus/state"
	"pollux/optimizer"
)

// DefaultInterval is the scheduling interval.
const DefaultInterval = 60 * time.Second

// soonGap is the least time between two rounds that were not due to the
// timer (a new leader, a job's first bid).
const soonGap = 200 * time.Millisecond

// Config configures the allocator actor of one server.
type Config struct {
	Store Store
	// Server is this server's id.
	Server string
	// Members lists the cluster's members: agents among them are
	// registered as nodes (registered nodes missing from it are marked
	// dead), servers among them host job actors. Nil: nodes are
	// registered by other means and every job actor runs on this server.
	Members Members
	// NodeGrace is how long a registered agent must be missing from the
	// membership before it is marked dead (default 3 s): gossip can
	// declare a busy but healthy machine dead for a moment, and marking
	// it dead would restart every job on it.
	NodeGrace time.Duration
	// Policy decides allocations (default optimizer.NewPollux() pricing
	// restarts at the delays the jobs measured).
	Policy optimizer.Policy
	// TypedPolicy decides the rounds whose alive nodes have several GPU
	// types (default optimizer.NewHetPollux(): a job runs on one type at
	// a time, chosen with its GPU count). Set it to Policy to use one
	// policy whatever the cluster.
	TypedPolicy optimizer.Policy
	// Levels are the cluster's topology levels a cluster without a
	// configuration is initialised with (nil: the rack alone).
	Levels []string
	// SearchBudget is how long the policy may search in one round
	// (default 400 ms): when a search of optimizer.Pollux took longer,
	// the next one does proportionally less work (down to the
	// optimizer's least population and generations), and back up when
	// it takes well less, so a loaded leader keeps its rounds short.
	SearchBudget time.Duration
	// ReclaimPolicy decides the what-if round of a federation lab's
	// reclaim (Reclaimable; default optimizer.NewGreedy(), pricing
	// restarts as Policy does: the committed allocation hill-climbed, a
	// fraction of the search's time). Under Tiresias, which is quick, the
	// default is Tiresias itself.
	ReclaimPolicy optimizer.Policy
	// Interval between rounds (default 60 s).
	Interval time.Duration
	// CheckpointRoot is the checkpoint root a cluster without a
	// configuration is initialised with (the configuration is set once,
	// by the first leader or the bootstrapping server).
	CheckpointRoot string
	// Retain is how long finished jobs and dead nodes stay in the state
	// before they are pruned (0: forever).
	Retain time.Duration
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
	// Lease is the agents' lease (default DefaultLease, at most 10
	// minutes): renewed every quarter of it while this server leads; a
	// node whose lease lapsed pauses its workers, and no incarnation of a
	// job starts while an older one may still run on a node the leader
	// has not heard from for the lease plus LeaseMargin (lease.go).
	Lease time.Duration
	// AckTimeout bounds how long a round waits for the nodes' acks
	// (default 5 s): a round ends when every node has answered or then.
	AckTimeout time.Duration
	// NodePID addresses a node's actor (default: its first address and
	// pb.NodeActor); HostPID a server's job host (default: its actor
	// address and pb.JobHostActor).
	NodePID func(n *state.Node) *actor.PID
	HostPID func(m cluster.Member) *actor.PID
	// Stats, if set, counts what the allocator drops.
	Stats *Stats
	// Autoscale, if set, sizes the cluster (scale.go).
	Autoscale *Autoscale
	// Federation, if set, is the lab's link to its federation: it is
	// given the lab's bid (FederationBid) after every round this server
	// leads.
	Federation *fedlink.Link
	// Seed starts the sequence of per-round seeds.
	Seed   uint64
	Logger *slog.Logger
	// Context, if set, bounds the Raft reads and commits the allocator
	// waits for: once it ends (the server stops), those in flight return
	// at once instead of waiting up to raftTimeout for a quorum that may
	// be gone, so that the actor stops promptly (default
	// context.Background()).
	Context context.Context
}

// raftTimeout bounds one Raft read or commit of the allocator.
const raftTimeout = 10 * time.Second

// raftContext bounds one Raft read or commit (Config.Context, raftTimeout).
func (a *allocator) raftContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(a.cfg.Context, raftTimeout)
}

// RoundInfo describes a round, for status, metrics and benchmarks.
type RoundInfo struct {
	Term       uint64
	Generation uint64
	Jobs       int
	GPUsUsed   int
	Fitness    float64
	// Began is when the round started; Duration is from then to the last
	// node's ack (or the ack timeout); Decided from then to the committed
	// round.
	Began    time.Time
	Duration time.Duration
	Decided  time.Duration
	// Committed is set when the round's command was committed; Bytes is
	// its encoded size; Dropped counts the entries it dropped.
	Committed bool
	Bytes     int
	Dropped   int
	// Nodes were sent an Assign; Acked answered in time.
	Nodes, Acked int
	// Sent is from Began to the last Assign handed to the transport, and
	// AckMedian to the median node's ack (of those that answered in
	// time): with Decided and Duration they say where a round's time
	// goes.
	Sent, AckMedian time.Duration
	// FirstOfTerm marks the first round of a leadership, and Elected is
	// when this server learnt it leads.
	FirstOfTerm bool
	Elected     time.Time
	// Effort is the search's effort for the next round (see SearchBudget);
	// SearchEffort the effort this round's search ran at (0: the policy
	// is not budgeted, as Tiresias; the least, minEffort, in the first
	// round of a leadership, whose time does not move Effort).
	Effort, SearchEffort float64
	// Policy names the policy that decided the round ("" when there was
	// nothing to decide).
	Policy string
	// Snapshot and Prev are the policy's input (nil when there was
	// nothing to decide), so that an observer can judge the decision,
	// e.g. against a search of full effort on the same input. Neither is
	// changed after the round.
	Snapshot *optimizer.Snapshot
	Prev     *optimizer.State
}

// minEffort bounds how far a slow search is cut down.
const minEffort = 1.0 / 64

// nextEffort is the search effort after a search of effort e took took:
// the work is scaled to fit the budget, and raised by a quarter when the
// search took under half of it.
func nextEffort(e float64, took, budget time.Duration) float64 {
	switch {
	case took > budget:
		e *= 0.9 * float64(budget) / float64(took)
	case took < budget/2:
		e *= 1.25
	}
	return min(max(e, minEffort), 1)
}

// Observer, if set on the allocator, is told about every round.
type Observer func(RoundInfo)

// Local messages of the allocator.
type (
	roundTick     struct{}
	leaderChanged struct{ leader bool }
	jobsChanged   struct{}
	ackTimeout    struct{ gen uint64 }
)

// NewAllocator returns the props of the allocator actor. observe may be
// nil.
func NewAllocator(cfg Config, observe Observer) (*actor.Props, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: no store", ErrConfig)
	}
	if cfg.Policy == nil {
		p := optimizer.NewPollux()
		p.MeasuredRestart = true
		cfg.Policy = p
	}
	if cfg.ReclaimPolicy == nil {
		g := optimizer.NewGreedy()
		if px, ok := cfg.Policy.(*optimizer.Pollux); ok {
			g.MeasuredRestart = px.MeasuredRestart // one objective for every round
		}
		cfg.ReclaimPolicy = g
		if _, fixed := cfg.Policy.(optimizer.Tiresias); fixed {
			cfg.ReclaimPolicy = cfg.Policy
		}
	}
	if cfg.TypedPolicy == nil {
		cfg.TypedPolicy = optimizer.NewHetPollux()
	}
	if cfg.SearchBudget <= 0 {
		cfg.SearchBudget = 400 * time.Millisecond
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
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 5 * time.Second
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Lease < 4*time.Millisecond || cfg.Lease > maxLease {
		return nil, fmt.Errorf("%w: lease %v outside [4ms, %v]", ErrConfig, cfg.Lease, maxLease)
	}
	if !(cfg.TimeScale > 0) {
		cfg.TimeScale = 1
	}
	if cfg.Context == nil {
		cfg.Context = context.Background()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodePID == nil {
		cfg.NodePID = func(n *state.Node) *actor.PID { return actor.NewPID(n.Addresses[0], pb.NodeActor) }
	}
	if cfg.HostPID == nil {
		cfg.HostPID = func(m cluster.Member) *actor.PID { return actor.NewPID(m.Meta.ActorAddr, pb.JobHostActor) }
	}
	if cfg.Stats == nil {
		cfg.Stats = &Stats{}
	}
	if cfg.Autoscale != nil {
		s := *cfg.Autoscale
		if err := s.Validate(); err != nil {
			return nil, err
		}
		s.defaults()
		cfg.Autoscale = &s
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &allocator{cfg: cfg, observe: observe, missing: map[string]time.Time{}, gone: map[string]time.Time{}, refused: map[string]string{}, effort: 1}
	}), nil
}

// allocator is the scheduling side of one server; it acts while its
// server leads.
type allocator struct {
	cfg     Config
	observe Observer
	self    *actor.PID
	sys     *actor.ActorSystem
	stop    chan struct{}

	// What only the leader holds; reset with every new leadership.
	term      uint64
	elected   time.Time // when this leadership was learnt
	won       time.Time // when Raft last said this server won an election
	prev      *optimizer.State
	fitness   float64 // of the last round's allocation (0: none yet)
	seed      uint64
	bids      map[string]*bidState     // latest bid message per job
	failed    map[string]failure       // job -> its failed incarnation
	acks      map[string]*pb.AssignAck // node -> latest ack
	cleanExit map[incKey]int           // clean exits without done, seen in acks
	finishing map[incKey]bool          // completions being committed
	hosting   map[string]hostedAt      // job -> server hosting its actor
	sessions  uint64                   // sessions given in this term
	missing   map[string]time.Time     // node -> since when it is missing from the membership
	gone      map[string]time.Time     // node -> since when it is dead or left (retention)
	refused   map[string]string        // node -> why its registration is refused (logged once)
	lease     *leaseState              // the agents' leases and the gate (lease.go)
	scaling   *scaleState              // provider calls in flight (scale.go)
	noSizeWhy string                   // why autoscaling decides no size, logged once (scale.go)

	leaseTimer *time.Timer
	plant      plant // a planted bug's state (test binaries with the judgebugs tag only)

	round     *roundState   // the round awaiting acks
	search    *pendingRound // the round whose search is under way
	lastRound time.Time
	timer     *time.Timer
	soonTimer *time.Timer
	firstDone bool    // the first round of the term has run
	effort    float64 // of the search (optimizer.Pollux.Effort)

	reportKey string // the cluster's (state.ClusterConfig), once read
}

type incKey struct {
	job string
	inc uint64
}

type failure struct {
	inc    uint64
	reason string
}

type hostedAt struct {
	server  string
	host    *actor.PID
	session uint64
}

// roundState is a committed round waiting for the nodes' acks.
type roundState struct {
	info    RoundInfo
	begin   time.Time
	waiting map[string]bool
	acks    []time.Duration // from begin, in the order the acks came
}

func (a *allocator) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.seed = a.cfg.Seed
		a.self = ctx.Self()
		sys := ctx.ActorSystem()
		a.sys = sys
		a.stop = make(chan struct{})
		a.timer = time.AfterFunc(min(a.cfg.Interval, 100*time.Millisecond), func() { sys.Root.Send(a.self, roundTick{}) })
		a.leaseTimer = time.AfterFunc(a.renewEvery(), func() { sys.Root.Send(a.self, leaseTick{}) })
		go a.watch(sys)
	case *actor.Stopping:
		a.timer.Stop()
		a.leaseTimer.Stop()
		if a.soonTimer != nil {
			a.soonTimer.Stop()
		}
		a.stepDown()
		close(a.stop)
	case roundTick:
		a.run(ctx)
		if a.search == nil {
			a.timer.Reset(a.cfg.Interval)
		} // else once the search is done, as for a round decided at once
	case searchDone:
		a.searched(ctx, m)
	case leaderChanged:
		if m.leader {
			// Act at once: a new leader must not wait for its timer.
			a.cfg.Logger.Info("allocator: won the election", "server", a.cfg.Server)
			a.won = time.Now()
			a.run(ctx)
		} else if a.term != 0 {
			a.cfg.Logger.Info("allocator: no longer leading", "term", a.term)
			a.stepDown()
		}
	case jobsChanged:
		// A new job's actor starts now (it bids, which brings a round);
		// a finished job's GPUs go to others at the next round, soon.
		if a.term != 0 {
			if st, ok := a.leading(ctx); ok && a.host(ctx, st) {
				a.soon(ctx)
			}
		}
	case *pb.Bid:
		a.bid(ctx, m)
	case *pb.AssignAck:
		if l := a.cfg.Federation; l != nil {
			m = l.SplitAck(m) // the runs of borrowers go back to them
		}
		a.acked(ctx, m, 0)
	case OrdersChanged:
		// A borrower ordered other runs on this lab's nodes: assign them
		// soon rather than at the next round.
		if a.term != 0 {
			a.soon(ctx)
		}
	case *pb.WorkerReports:
		if l := a.cfg.Federation; l != nil {
			l.Relay(m) // borrowed workers' reports, sent here by this lab's nodes
		}
	case *pb.WorkerExited:
		if l := a.cfg.Federation; l != nil {
			l.Relay(m)
		}
	case *pb.LeaseAck:
		a.leaseAcked(ctx, m)
	case leaseTick:
		a.leaseTicked(ctx)
	case leaseVerified:
		a.leaseConfirmed(ctx, m)
	case gateTick:
		if a.term != 0 {
			a.release(ctx)
		}
	case releaseDue:
		if a.term != 0 && a.lease != nil {
			a.lease.releasing = false
			a.release(ctx)
		}
	case resendDue:
		if a.term != 0 && a.lease != nil && len(a.lease.resendTo) > 0 {
			a.resend(ctx)
		}
	case scaleDone:
		a.scaleFinished(ctx, m)
	case *pb.HostAck:
	case ackTimeout:
		if r := a.round; r != nil && r.info.Generation == m.gen {
			a.cfg.Logger.Warn("allocator: nodes did not acknowledge the round", "generation", m.gen,
				"missing", slices.Sorted(maps.Keys(r.waiting)))
			a.finishRound()
		}
	}
}

// watch turns the store's notifications into messages.
func (a *allocator) watch(sys *actor.ActorSystem) {
	leader, jobs := a.cfg.Store.LeaderChanges(), a.cfg.Store.JobsChanged()
	for {
		select {
		case l := <-leader:
			sys.Root.Send(a.self, leaderChanged{leader: l})
		case <-jobs:
			sys.Root.Send(a.self, jobsChanged{})
		case <-a.stop:
			return
		}
	}
}

// soon runs a round within soonGap of the last one.
func (a *allocator) soon(ctx actor.Context) {
	if a.soonTimer != nil {
		return
	}
	d := max(soonGap-time.Since(a.lastRound), 0)
	sys := ctx.ActorSystem()
	a.soonTimer = time.AfterFunc(d, func() { sys.Root.Send(a.self, roundTick{}) })
}

// stepDown forgets everything only a leader holds.
func (a *allocator) stepDown() {
	if a.lease != nil && a.lease.gateTimer != nil {
		a.lease.gateTimer.Stop()
	}
	a.lease, a.scaling, a.noSizeWhy = nil, nil, ""
	a.term, a.prev, a.fitness, a.round, a.firstDone = 0, nil, 0, nil, false
	a.bids, a.failed, a.acks, a.cleanExit, a.finishing, a.hosting = nil, nil, nil, nil, nil, nil
	clear(a.missing)
	clear(a.gone)
}

// leading reads the state if this server leads, starting a new
// leadership's memory when the term changed.
func (a *allocator) leading(ctx actor.Context) (*state.State, bool) {
	term, leader := a.cfg.Store.Leadership()
	if !leader {
		if a.term != 0 {
			a.cfg.Logger.Info("allocator: no longer leading", "term", a.term)
			a.stepDown()
		}
		return nil, false
	}
	c, cancel := a.raftContext()
	defer cancel()
	st, err := a.cfg.Store.Read(c)
	if err != nil {
		a.cfg.Logger.Warn("allocator: reading state", "err", err)
		return nil, false
	}
	if term != a.term {
		a.stepDown()
		a.term, a.elected, a.won = term, a.won, time.Time{}
		if a.elected.IsZero() {
			a.elected = time.Now()
		}
		a.bids, a.failed, a.acks = map[string]*bidState{}, map[string]failure{}, map[string]*pb.AssignAck{}
		a.cleanExit, a.finishing, a.hosting = map[incKey]int{}, map[incKey]bool{}, map[string]hostedAt{}
		a.lease = newLeaseState(a.cfg.Now())
		a.cfg.Logger.Info("allocator: leading", "term", term, "generation", st.Allocation.Generation)
	}
	return st, true
}

// run runs one round if this server leads: it decides on a snapshot of
// the state, the policy's search running on a goroutine of its own (so
// that lease renewals, acks and bids are handled meanwhile), and then
// commits and assigns (decided).
func (a *allocator) run(ctx actor.Context) {
	if a.soonTimer != nil {
		a.soonTimer.Stop()
		a.soonTimer = nil
	}
	if a.search != nil {
		a.search.again = true // once the search under way is done
		return
	}
	begin := time.Now()
	a.lastRound = begin
	st, ok := a.leading(ctx)
	if !ok {
		return
	}
	c, cancel := a.raftContext()
	defer cancel()
	if st.Config.ID == "" || st.Config.ReportKey == "" {
		if st = a.initCluster(c, st.Config); st == nil {
			return
		}
	}
	a.reportKey = st.Config.ReportKey
	if a.reconcileMembers(c, st) || a.prune(c, st) {
		var err error
		if st, err = a.cfg.Store.Read(c); err != nil {
			a.cfg.Logger.Warn("allocator: reading state", "err", err)
			return
		}
	}
	if a.round != nil {
		a.finishRound() // the previous round's missing acks are late
	}
	a.reconcileExits(st)
	now := a.cfg.Now()
	nowS := float64(now.UnixNano()) / 1e9
	updates, bids := a.updates(st)
	a.seed++
	// A borrower stops placing on a lease one interval before it expires.
	snap, err := buildSnapshot(st, roundNodes(st, nowS+a.cfg.Interval.Seconds()), bids, nowS, a.cfg.TimeScale, a.seed)
	if err != nil {
		a.cfg.Logger.Error("allocator: building snapshot", "err", err)
		return
	}
	p := &pendingRound{term: a.term, st: st, snap: snap, bids: bids, updates: updates, nowS: nowS, begin: begin,
		info: RoundInfo{Term: a.term, Jobs: len(snap.Jobs), FirstOfTerm: !a.firstDone, Elected: a.elected, Began: begin}}
	if len(snap.Jobs) == 0 || len(snap.Nodes) == 0 {
		a.decided(ctx, p)
		return
	}
	policy := a.policy(snap)
	search := policy
	if !p.info.FirstOfTerm {
		policy, search = a.autoscalePolicy(snap, policy)
	}
	p.info.Policy = policy.Name()
	px, budgeted := search.(optimizer.Budgeted)
	if budgeted {
		// A new leader acts at once: its first round searches at the
		// least effort (seeded, like every search, with the committed
		// allocation hill-climbed, so never worse than that climb), and
		// the next round, soon after, at the effort the budget allows.
		effort := a.effort
		if p.info.FirstOfTerm {
			effort = minEffort
		}
		px.SetEffort(effort)
		p.info.SearchEffort = effort
	}
	// Only the budgeted rounds' times move the effort.
	p.budgeted, p.policyName = budgeted && !p.info.FirstOfTerm, policy.Name()
	p.info.Snapshot, p.info.Prev = snap, a.prev
	a.search = p
	prev, sys, self := a.prev, ctx.ActorSystem(), ctx.Self()
	go func() {
		t0 := time.Now()
		res, err := policy.Allocate(snap, prev)
		sys.Root.Send(self, searchDone{p: p, res: res, err: err, took: time.Since(t0)})
	}()
}

// pendingRound is a round between its snapshot and its commit.
type pendingRound struct {
	term       uint64
	st         *state.State
	snap       *optimizer.Snapshot
	bids       map[string]*state.Bid
	updates    []state.RoundJob
	nowS       float64
	begin      time.Time
	info       RoundInfo
	budgeted   bool // its search's time moves the effort
	policyName string
	res        *optimizer.Result // the search's (nil: nothing to decide)
	again      bool              // a round was asked for during the search
}

// searchDone is a round's search, done.
type searchDone struct {
	p    *pendingRound
	res  optimizer.Result
	err  error
	took time.Duration
}

// searched takes a round's search result: the round goes on if this
// server still leads in the term it began in.
func (a *allocator) searched(ctx actor.Context, m searchDone) {
	p := m.p
	if a.search == p {
		a.search = nil
	}
	a.timer.Reset(a.cfg.Interval)
	if p.again {
		a.soon(ctx)
	}
	if p.budgeted {
		a.effort = nextEffort(a.effort, m.took, a.cfg.SearchBudget)
		p.info.Effort = a.effort
	}
	switch {
	case m.err != nil:
		a.cfg.Logger.Error("allocator: policy", "err", m.err)
		return
	case a.term != p.term:
		return // leadership moved during the search
	}
	p.res = &m.res
	a.decided(ctx, p)
}

// decided commits a round the policy decided (or one with nothing to
// decide), assigns it and reports it.
func (a *allocator) decided(ctx actor.Context, p *pendingRound) {
	st, snap, info, nowS := p.st, p.snap, p.info, p.nowS
	slots := map[string][]state.Slot{}
	var scale *optimizer.ScaleDecision
	var note string
	if res := p.res; res != nil {
		held, err := optimizer.HoldConstraints(snap, res)
		if err != nil {
			a.cfg.Logger.Error("allocator: checking constraints", "err", err)
			return
		}
		for _, j := range held {
			a.cfg.Logger.Debug("allocator: the policy placed a job where its constraints forbid; it waits", "job", snap.Jobs[j].ID, "policy", p.policyName)
		}
		note = roundNote(info.Policy, a.fitness, res.Diagnostics.Fitness)
		a.prev, info.Fitness, scale = res.State, res.Diagnostics.Fitness, res.Scale
		a.fitness = info.Fitness
		if slots, err = Slots(snap, res.Placements); err != nil {
			a.cfg.Logger.Error("allocator: converting allocation", "err", err)
			return
		}
	}
	c, cancel := a.raftContext()
	defer cancel()
	accrue := 0.0
	if st.LastRound > 0 {
		accrue = min(max(nowS-st.LastRound, 0), 2*a.cfg.Interval.Seconds()) * a.cfg.TimeScale
	}
	r := &state.Round{Generation: st.Allocation.Generation + 1, Term: a.term, Time: nowS, Accrue: accrue,
		MaxFailures: max(a.cfg.MaxFailures, 0), Jobs: slots, Updates: p.updates, Note: note, Leader: a.cfg.Server}
	if enc, err := state.Encode(r); err == nil {
		info.Bytes = len(enc)
	}
	res, err := a.cfg.Store.CommitRound(c, r)
	if err != nil {
		a.cfg.Logger.Warn("allocator: committing round", "generation", r.Generation, "err", err)
		return
	}
	begin := p.begin
	info.Committed, info.Generation, info.Decided, info.Dropped = true, r.Generation, time.Since(begin), len(res.Dropped)
	a.committed(res)
	st = a.cfg.Store.LocalState()
	a.forget(st)
	_, info.GPUsUsed = st.GPUCounts()
	a.host(ctx, st)
	a.assign(ctx, st, info, begin)
	a.scale(ctx, st, scale)
	if l := a.cfg.Federation; l != nil {
		bid := FederationBid(snap, st, l.Settings().PowerMean)
		// The what-if round runs ReclaimPolicy (the committed allocation
		// hill-climbed): a fraction of the search's time.
		reclaim, err := Reclaimable(st, p.bids, nowS, a.cfg.TimeScale, a.seed, a.cfg.ReclaimPolicy)
		if err != nil {
			a.cfg.Logger.Warn("allocator: what-if round of the federation", "err", err)
			reclaim = map[string]bool{} // no reclaim on a round that failed
		}
		bid.Reclaimable = reclaim
		l.SetBid(bid)
	}
	if info.FirstOfTerm {
		a.soon(ctx) // the full search, soon
	}
	a.firstDone = true
}

// roundNote says why a round chose its allocation, for the events of
// the jobs it moves: the policy, its fitness and the last round's (prev
// 0: none). The two are fitnesses of different rounds' jobs, so the note
// shows both rather than a gain.
func roundNote(policy string, prev, fitness float64) string {
	if finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }; prev == 0 || !finite(prev) || !finite(fitness) {
		return fmt.Sprintf("policy %s, fitness %.4g", policy, fitness)
	}
	return fmt.Sprintf("policy %s, fitness %.4g (the last round's %.4g)", policy, fitness, prev)
}

// policy is the policy of a round: TypedPolicy when the alive nodes have
// several GPU types, else Policy.
func (a *allocator) policy(snap *optimizer.Snapshot) optimizer.Policy {
	if len(gpuTypes(snap.Nodes)) > 1 {
		return a.cfg.TypedPolicy
	}
	return a.cfg.Policy
}

// initCluster gives a cluster without a configuration one (an existing
// cluster upgraded, or bootstrapped by a server that could not write it),
// and a cluster without a report key (configured before report tokens)
// one: that cluster keeps its own checkpoint root and levels, whatever
// this server was started with.
func (a *allocator) initCluster(c context.Context, have state.ClusterConfig) *state.State {
	init := state.NewInitCluster(a.cfg.CheckpointRoot, a.cfg.Levels...)
	if have.ID != "" {
		init.CheckpointRoot, init.Levels = have.CheckpointRoot, nil
	}
	if err := a.cfg.Store.InitCluster(c, init); err != nil {
		a.cfg.Logger.Error("allocator: initialising the cluster configuration", "err", err)
		return nil
	}
	st, err := a.cfg.Store.Read(c)
	if err != nil {
		a.cfg.Logger.Warn("allocator: reading state", "err", err)
		return nil
	}
	a.cfg.Logger.Info("allocator: cluster configured", "cluster", st.Config.ID, "checkpoint_root", st.Config.CheckpointRoot)
	return st
}

// assignOptions are the options of Assignments for this leader.
func (a *allocator) assignOptions() AssignOptions {
	o := AssignOptions{Term: a.term, Owner: a.owner}
	if l := a.cfg.Federation; l != nil {
		o.BorrowedHost = l.Host
	}
	return o
}

// assign sends every alive node its desired state and waits for the acks
// (as messages) to end the round.
func (a *allocator) assign(ctx actor.Context, st *state.State, info RoundInfo, begin time.Time) {
	assign, uncovered := Assignments(st, a.assignOptions())
	assign = a.plant.staleAllocation(a, st, assign)
	for _, id := range uncovered {
		a.cfg.Logger.Error("allocator: a placed job's bid does not cover its shape; not run this round", "job", id)
	}
	a.gate(st, assign)
	l := a.lease
	l.gen, l.cluster, l.targets, l.sentAt = info.Generation, st.Config.ID, map[string]*actor.PID{}, a.cfg.Now()
	rs := &roundState{info: info, begin: begin, waiting: map[string]bool{}}
	a.merge(st, assign)
	for _, id := range slices.Sorted(maps.Keys(assign)) {
		n := st.Nodes[id]
		if n == nil && a.cfg.Federation != nil {
			if _, _, ok := federation.SplitBorrowed(id); ok {
				rs.waiting[id] = true
				a.order(ctx, id, assign[id])
			}
			continue
		}
		if n == nil || len(n.Addresses) == 0 {
			continue
		}
		rs.waiting[id] = true
		l.targets[id] = a.cfg.NodePID(n)
		assign[id].ForgetLogs = prunedLogs(st, a.acks[id])
		a.send(ctx, id, l.targets[id], assign[id])
	}
	rs.info.Nodes, rs.info.Sent = len(rs.waiting), time.Since(begin)
	a.round = rs
	if len(rs.waiting) == 0 {
		a.finishRound()
		return
	}
	sys, gen := ctx.ActorSystem(), info.Generation
	time.AfterFunc(a.cfg.AckTimeout, func() { sys.Root.Send(a.self, ackTimeout{gen: gen}) })
}

// prunedLogs are the jobs a node's last ack says it keeps logs of that
// st no longer holds (the cluster pruned them): the node may delete
// their logs.
func prunedLogs(st *state.State, ack *pb.AssignAck) []string {
	var out []string
	for _, job := range ack.GetLogJobs() {
		if st.Jobs[job] == nil {
			out = append(out, job)
		}
	}
	return out
}

// finishRound reports the round awaiting acks.
func (a *allocator) finishRound() {
	r := a.round
	if r == nil {
		return
	}
	a.round = nil
	r.info.Acked = r.info.Nodes - len(r.waiting)
	r.info.Duration = time.Since(r.begin)
	if len(r.acks) > 0 {
		r.info.AckMedian = r.acks[len(r.acks)/2]
	}
	if r.info.Committed {
		a.cfg.Logger.Debug("allocator: round", "generation", r.info.Generation, "term", r.info.Term, "jobs", r.info.Jobs,
			"gpus_used", r.info.GPUsUsed, "fitness", r.info.Fitness, "took", r.info.Duration, "acked", r.info.Acked)
	}
	if a.observe != nil {
		a.observe(r.info)
	}
}

// owner is the actor a job's workers report to: its actor on the server
// hosting it.
func (a *allocator) owner(job string) *pb.Ref {
	h, ok := a.hosting[job]
	if !ok {
		return nil
	}
	return &pb.Ref{Address: h.host.Address, Id: h.host.Id + "/job-" + job}
}
