package allocator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus/state"
)

// The agents' leases, the leader's side (the node's side is
// actors/node/lease.go): every quarter of the lease the leader confirms
// its leadership with a quorum, then renews every alive node's lease,
// echoing the node's newest ack. The gate holds a job's new incarnation
// until no older one can run unpaused. docs/control-plane.md ("Agents
// hold leases", "The gate") gives the argument.

// DefaultLease is the agents' lease (Config.Lease).
const DefaultLease = 2 * time.Second

// LeaseMargin is how long after a node's lease can have ended the leader
// still counts it as running: it covers the node's timer firing late
// and its signals taking effect.
func LeaseMargin(lease time.Duration) time.Duration { return lease / 2 }

// maxLease bounds Config.Lease (the nodes refuse longer ones).
const maxLease = 10 * time.Minute

// fastRenewals bounds the renewals a node gets between two ticks beyond
// the tick's own: a node this leadership has not renewed yet (just
// assigned, or brought up to date) is renewed at once, which takes a
// renewal that fetches a nonce and one that echoes it. A node whose last
// renewal took half the lease or more to be answered gets none (see
// nodeLease.slow).
const fastRenewals = 3

// maxUnanswered bounds the renewals a node's lease remembers as sent and
// not answered: a node that stops answering costs no more.
const maxUnanswered = 16

// Local messages of the lease.
type (
	leaseTick     struct{}
	gateTick      struct{}
	releaseDue    struct{}
	resendDue     struct{}
	leaseVerified struct {
		term uint64
		// echo holds the nodes to renew and the nonce to echo to each.
		echo  map[string]uint64
		err   error
		began time.Time
	}
)

// leaseState is what the leader knows of the nodes' leases; a new one
// starts with every leadership.
type leaseState struct {
	start   time.Time             // when this leadership began (Config.Now)
	cluster string                // the cluster id
	gen     uint64                // the generation of the newest assignments sent
	sentAt  time.Time             // when they were sent
	targets map[string]*actor.PID // the nodes they were sent to: renewed
	nodes   map[string]*nodeLease
	// released are the incarnations the gate let start in this
	// leadership; held those it holds now.
	released, held map[incKey]bool
	verifying      bool            // a leadership confirmation is under way
	due            map[string]bool // nodes to renew after the next confirmation
	releasing      bool            // a releaseDue is in the mailbox
	// resendTo are the nodes behind the newest assignment that get it
	// again once the mailbox's messages are handled (a resendDue is
	// in the mailbox while it is not empty).
	resendTo  map[string]bool
	gateTimer *time.Timer
}

// nodeLease is one node's lease as the leader knows it.
type nodeLease struct {
	nonce   uint64    // of its newest LeaseAck
	at      time.Time // when that arrived: its lease ends before at + lease
	renewed bool      // its newest answer to a renewal said it renewed
	fast    int       // renewals beyond the tick's since the last tick
	resent  time.Time // when its assignment was last sent outside a round
	// slow: the node's answer to its last renewal came half a lease or
	// more after the renewal was sent. A renewal is refused once the ack
	// it echoes is a lease old, and an ack the leader has just got is
	// already one trip old when the renewal leaves, so a fast renewal
	// would likely be refused too, and under overload its messages add
	// to what keeps the trips long; such a node is renewed on the ticks
	// only.
	slow bool
	// renewals are the renewals sent to the node and not answered yet,
	// oldest first (at most maxUnanswered): a node answers in order, so
	// its answer to a renewal sent after the newest assignment shows
	// whether it got that assignment, and when it comes, how long the
	// trip took.
	renewals []sentRenewal
	// listed holds, per job, the newest generation of an assignment
	// this leader sent the node that listed the job.
	listed map[string]uint64
}

// sentRenewal is a renewal sent: the generation it carried, and when.
type sentRenewal struct {
	gen uint64
	at  time.Time
}

func newLeaseState(now time.Time) *leaseState {
	return &leaseState{start: now, targets: map[string]*actor.PID{}, nodes: map[string]*nodeLease{},
		released: map[incKey]bool{}, held: map[incKey]bool{}, due: map[string]bool{}, resendTo: map[string]bool{}}
}

func (l *leaseState) node(id string) *nodeLease {
	nl := l.nodes[id]
	if nl == nil {
		nl = &nodeLease{listed: map[string]uint64{}}
		l.nodes[id] = nl
	}
	return nl
}

// send sends node id (at pid) an assignment, noting the jobs it lists.
func (a *allocator) send(ctx actor.Context, id string, pid *actor.PID, as *pb.Assign) {
	nl := a.lease.node(id)
	for _, rj := range as.Runs {
		nl.listed[rj.Job] = max(nl.listed[rj.Job], as.Generation)
	}
	ctx.Request(pid, as)
}

// renewEvery is the period of the renewals.
func (a *allocator) renewEvery() time.Duration { return a.cfg.Lease / 4 }

// leaseTicked renews the leases, every renewEvery.
func (a *allocator) leaseTicked(ctx actor.Context) {
	a.leaseTimer.Reset(a.renewEvery())
	if a.term == 0 || a.lease == nil {
		return
	}
	for _, nl := range a.lease.nodes {
		nl.fast = 0
	}
	a.renewLeases(ctx, slices.Collect(maps.Keys(a.lease.targets))...)
}

// renewLeases confirms the leadership with a quorum, in the background,
// and then renews the leases of nodes ids (leaseConfirmed). Nodes asked
// for while a confirmation is under way are renewed after the next one:
// a renewal echoes only nonces that arrived before its confirmation
// began.
func (a *allocator) renewLeases(ctx actor.Context, ids ...string) {
	l := a.lease
	if l.gen == 0 {
		return // nothing assigned yet in this leadership
	}
	for _, id := range ids {
		l.due[id] = true
	}
	if l.verifying || len(l.due) == 0 {
		return
	}
	l.verifying = true
	echo := map[string]uint64{}
	for id := range l.due {
		echo[id] = l.node(id).nonce
	}
	clear(l.due)
	term, began, timeout := a.term, a.cfg.Now(), a.renewEvery()
	store, sys, self := a.cfg.Store, ctx.ActorSystem(), ctx.Self()
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		t, err := store.ConfirmLeadership(c)
		if err == nil && t != term {
			err = fmt.Errorf("allocator: leading term %d, not %d", t, term)
		}
		sys.Root.Send(self, leaseVerified{term: term, echo: echo, err: err, began: began})
	}()
}

// leaseConfirmed renews the nodes the confirmation was for that are
// assigned in the newest round, echoing the nonces that arrived before
// the confirmation began.
func (a *allocator) leaseConfirmed(ctx actor.Context, m leaseVerified) {
	l := a.lease
	if l == nil || a.term != m.term {
		return
	}
	l.verifying = false
	if m.err != nil {
		a.cfg.Logger.Warn("allocator: leadership not confirmed: agents' leases not renewed", "term", m.term, "err", m.err)
		return
	}
	self := &pb.Ref{Address: ctx.Self().Address, Id: ctx.Self().Id}
	ms := uint64(a.cfg.Lease / time.Millisecond)
	for _, id := range slices.Sorted(maps.Keys(m.echo)) {
		if pid, ok := l.targets[id]; ok {
			nl := l.node(id)
			if len(nl.renewals) == maxUnanswered {
				nl.renewals = nl.renewals[1:]
			}
			nl.renewals = append(nl.renewals, sentRenewal{gen: l.gen, at: a.cfg.Now()})
			ctx.Request(pid, &pb.LeaseRenew{ClusterId: l.cluster, Term: a.term, Generation: l.gen, LeaseMs: ms,
				Echo: m.echo[id], Allocator: self})
		}
	}
	a.renewLeases(ctx) // those asked for meanwhile
}

// leaseAcked takes a node's answer to a renewal (or its unsolicited
// update): its nonce, and what it runs, as an AssignAck.
func (a *allocator) leaseAcked(ctx actor.Context, m *pb.LeaseAck) {
	l := a.lease
	if a.term == 0 || l == nil || m.Status == nil {
		return
	}
	if _, ok := l.targets[m.Status.Node]; !ok {
		return
	}
	nl := l.node(m.Status.Node)
	now := a.cfg.Now()
	if m.Nonce != 0 {
		nl.nonce, nl.at = m.Nonce, now
	}
	var answered uint64 // the generation of the renewal m answers
	if !m.Update {
		nl.renewed = m.Renewed && m.Status.Term == a.term
		if len(nl.renewals) > 0 {
			r := nl.renewals[0]
			answered, nl.renewals = r.gen, nl.renewals[1:]
			nl.slow = now.Sub(r.at) >= a.cfg.Lease/2
		}
	}
	a.acked(ctx, m.Status, answered)
}

// leaseFollowUp acts on a node's ack (of an assignment, or of a renewal
// that carried generation answered; 0 when it answers none): a
// node behind the newest assignment is sent it again, one up to date but
// not renewed yet is renewed at once, and incarnations held by the gate
// are let through if they may start now.
func (a *allocator) leaseFollowUp(ctx actor.Context, ack *pb.AssignAck, answered uint64) {
	l := a.lease
	if l == nil || l.gen == 0 {
		return
	}
	if _, ok := l.targets[ack.Node]; ok {
		nl := l.node(ack.Node)
		now := a.cfg.Now()
		behind := ack.Term < a.term || (ack.Term == a.term && ack.Generation < l.gen) || ack.ClusterId != l.cluster
		// A node answers in order: behind in its answer to a renewal
		// sent after the newest assignment, it did not get that
		// assignment. Behind in an answer to anything older, the
		// assignment may still be on its way (a round takes a while to
		// reach hundreds of nodes): it is sent again only once a whole
		// lease has passed.
		lost := answered == l.gen || now.Sub(l.sentAt) >= a.cfg.Lease
		late := lost && now.Sub(nl.resent) >= a.renewEvery()
		switch {
		case ack.Ok && behind && late:
			nl.resent = now
			a.resendSoon(ctx, ack.Node)
		case !behind && ack.Term == a.term && !nl.renewed && !nl.slow && nl.fast < fastRenewals:
			nl.fast++
			a.renewLeases(ctx, ack.Node)
		}
	}
	a.releaseSoon(ctx)
}

// releaseSoon has the gate's held runs looked at (release) once the
// messages already in the mailbox are handled: a round's hundreds of
// acks then cost one look at the whole allocation, not one each.
func (a *allocator) releaseSoon(ctx actor.Context) {
	l := a.lease
	if l == nil || len(l.held) == 0 || l.releasing {
		return
	}
	l.releasing = true
	ctx.Send(ctx.Self(), releaseDue{})
}

// forget drops, after a committed round, what the gate holds of jobs
// gone or of incarnations replaced.
func (a *allocator) forget(st *state.State) {
	l := a.lease
	for _, nl := range l.nodes {
		for job := range nl.listed {
			if j := st.Jobs[job]; j == nil || j.State.Terminal() {
				delete(nl.listed, job)
			}
		}
	}
	for k := range l.released {
		if j := st.Jobs[k.job]; j == nil || j.Incarnation != k.inc {
			delete(l.released, k)
		}
	}
}

// gateView is what the gate decides from.
type gateView struct {
	now, start time.Time
	// wait is the lease plus its margin.
	wait time.Duration
	term uint64
	acks map[string]*pb.AssignAck
	at   map[string]time.Time // when each node's newest nonce arrived
	// listed holds, per node and job, the newest generation of an
	// assignment this leader sent the node that listed the job.
	listed map[string]map[string]uint64
	nodes  []string // every node the state knows
}

// open reports whether incarnation k may start: no older incarnation of
// its job can still run unpaused on any node. If not, until says when
// the leases it waits for will have ended (zero if it waits for a node's
// ack) and waiting names those nodes.
func (v *gateView) open(k incKey) (ok bool, until time.Time, waiting []string) {
	if k.inc <= 1 {
		return true, time.Time{}, nil // no older incarnation ever ran
	}
	for _, ack := range v.acks {
		for _, rs := range ack.Runs {
			if rs.Job == k.job && rs.Incarnation == k.inc && rs.Refused == "" {
				return true, time.Time{}, nil // a leader let it start already
			}
		}
	}
	for _, id := range v.nodes {
		if v.clear(id, k) {
			continue
		}
		end := v.start
		if at := v.at[id]; at.After(end) {
			end = at
		}
		end = end.Add(v.wait)
		if v.now.Before(end) {
			waiting = append(waiting, id)
			if end.After(until) {
				until = end
			}
		}
	}
	return len(waiting) == 0, until, waiting
}

// clear reports whether node id's newest ack, of this term (the node
// refuses earlier leaders' assignments from then on), at a generation no
// older than the last assignment this leader sent it that listed k's job,
// shows no live or pending worker of an older incarnation of the job.
func (v *gateView) clear(id string, k incKey) bool {
	ack := v.acks[id]
	if ack == nil || ack.Term != v.term || ack.Generation < v.listed[id][k.job] {
		return false
	}
	for _, rs := range ack.Runs {
		if rs.Job == k.job && rs.Incarnation < k.inc && rs.Refused == "" && (rs.Alive > 0 || rs.Pending) {
			return false
		}
	}
	return true
}

// view is the gate's view now.
func (a *allocator) view(st *state.State) *gateView {
	l := a.lease
	v := &gateView{now: a.cfg.Now(), start: l.start, wait: a.cfg.Lease + LeaseMargin(a.cfg.Lease), term: a.term,
		acks: a.acks, at: map[string]time.Time{}, listed: map[string]map[string]uint64{}}
	for id, nl := range l.nodes {
		v.at[id], v.listed[id] = nl.at, nl.listed
	}
	known := map[string]bool{}
	for id := range st.Nodes {
		known[id] = true
	}
	for id := range a.acks {
		known[id] = true
	}
	v.nodes = slices.Sorted(maps.Keys(known))
	return v
}

// gate marks held, in the assignments, the runs of incarnations that may
// not start yet (l.held): a node keeps such a run if it runs it already
// (a new leader, which has no ack yet, must not stop what an earlier
// leader let start) but does not start it. It arms the gate's timer for
// the earliest time one of them may start.
func (a *allocator) gate(st *state.State, assign map[string]*pb.Assign) {
	l := a.lease
	v := a.view(st)
	held := map[incKey]bool{}
	var next time.Time
	decided := map[incKey]bool{}
	for _, id := range slices.Sorted(maps.Keys(assign)) {
		for _, rj := range assign[id].Runs {
			k := incKey{rj.Job, rj.Incarnation}
			if !l.released[k] && !decided[k] {
				decided[k] = true
				ok, until, waiting := v.open(k)
				if ok {
					l.released[k] = true
					if l.held[k] {
						a.cfg.Logger.Info("allocator: incarnation may start", "job", k.job, "incarnation", k.inc)
					}
				} else {
					held[k] = true
					if !l.held[k] {
						a.cfg.Logger.Info("allocator: incarnation held until no older one can run", "job", k.job,
							"incarnation", k.inc, "waiting_for", waiting, "lease_ends_by", until.Sub(v.now).Round(time.Millisecond))
					}
					if !until.IsZero() && (next.IsZero() || until.Before(next)) {
						next = until
					}
				}
			}
			rj.Hold = !l.released[k]
		}
	}
	l.held = held
	if !next.IsZero() {
		d := next.Sub(v.now) + time.Millisecond
		if l.gateTimer == nil {
			sys, self := a.sys, a.self
			l.gateTimer = time.AfterFunc(d, func() { sys.Root.Send(self, gateTick{}) })
		} else {
			l.gateTimer.Reset(d)
		}
	}
}

// release sends the nodes the runs the gate held and now lets through.
func (a *allocator) release(ctx actor.Context) {
	l := a.lease
	if l == nil || len(l.held) == 0 {
		return
	}
	before := l.held
	st := a.cfg.Store.LocalState()
	if st.Allocation.Generation != l.gen {
		return // a round is under way: it assigns anew
	}
	assign, _ := Assignments(st, a.assignOptions())
	a.gate(st, assign)
	a.merge(st, assign)
	for _, id := range slices.Sorted(maps.Keys(assign)) {
		pid, ok := l.targets[id]
		if !ok {
			continue
		}
		if slices.ContainsFunc(assign[id].Runs, func(rj *pb.RunJob) bool { return before[incKey{rj.Job, rj.Incarnation}] && !rj.Hold }) {
			a.send(ctx, id, pid, assign[id])
		}
	}
}

// resendSoon has node id sent the newest assignment again once the
// messages already in the mailbox are handled (resend): when a slow
// round leaves hundreds of nodes behind, their acks cost one reading of
// the state and one computation of the assignments, not one each.
func (a *allocator) resendSoon(ctx actor.Context, id string) {
	l := a.lease
	if len(l.resendTo) == 0 {
		ctx.Send(ctx.Self(), resendDue{})
	}
	l.resendTo[id] = true
}

// resend sends the nodes that missed the newest assignment the
// assignment again (a lease is renewed only once its node has applied
// it).
func (a *allocator) resend(ctx actor.Context) {
	l := a.lease
	ids := slices.Sorted(maps.Keys(l.resendTo))
	clear(l.resendTo)
	st := a.cfg.Store.LocalState()
	if st.Allocation.Generation != l.gen {
		return
	}
	assign, _ := Assignments(st, a.assignOptions())
	a.gate(st, assign)
	a.merge(st, assign)
	for _, id := range ids {
		pid, ok := l.targets[id]
		if as := assign[id]; ok && as != nil {
			a.cfg.Logger.Info("allocator: node missed the newest assignment: sent again", "node", id, "generation", as.Generation)
			a.send(ctx, id, pid, as)
		}
	}
}
