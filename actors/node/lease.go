package node

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
)

// A node runs workers only while it holds a lease from the Raft leader's
// allocator: when the lease lapses it pauses its workers (SIGSTOP: a
// stopped process writes no checkpoint), a renewal resumes them, and a
// paused run no longer wanted is killed, never terminated. The lease runs
// from when the node sent the ack a renewal echoes. docs/control-plane.md
// ("Agents hold leases") gives the argument.

// maxLease bounds the lease a renewal may grant.
const maxLease = 10 * time.Minute

// keptAcks is how many of its newest acks' nonces the node remembers.
const keptAcks = 32

// leaseCheck asks the actor to compare its lease with the clock.
type leaseCheck struct{}

// leaseState is the node's lease.
type leaseState struct {
	expiry time.Time  // valid before it; zero: never granted
	lapsed bool       // it lapsed: live workers are paused, nothing starts
	acks   []sentAck  // nonces of the newest acks, oldest first
	leader *actor.PID // the allocator of the newest accepted renewal
	timer  *time.Timer
}

type sentAck struct {
	nonce uint64
	at    time.Time
}

// sentAt is when the ack of nonce was made, if it is one of the newest.
func (l *leaseState) sentAt(nonce uint64) (time.Time, bool) {
	if nonce == 0 {
		return time.Time{}, false
	}
	for _, s := range l.acks {
		if s.nonce == nonce {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// leaseValid reports whether the node holds a lease now.
func (a *nodeActor) leaseValid(now time.Time) bool { return now.Before(a.lease.expiry) }

// renew takes a lease renewal and answers it.
func (a *nodeActor) renew(ctx actor.Context, m *pb.LeaseRenew) *pb.LeaseAck {
	now := a.cfg.Now()
	refused := a.renewal(m, now)
	if refused == "" {
		a.lease.leader = nil
		if r := m.Allocator; r != nil && r.Address != "" && r.Id != "" {
			a.lease.leader = actor.NewPID(r.Address, r.Id)
		}
		if a.lease.lapsed {
			a.resume()
		}
		a.armLease(ctx, now)
		a.schedule(ctx)
	} else {
		a.cfg.Logger.Debug("node: lease not renewed", "term", m.GetTerm(), "generation", m.GetGeneration(), "why", refused)
	}
	return a.leaseAck(refused, false)
}

// renewal extends the lease by m if m may, or says why not.
func (a *nodeActor) renewal(m *pb.LeaseRenew, now time.Time) string {
	switch {
	case a.shutdown != nil:
		return "node is shutting down"
	case m.ClusterId == "" || m.ClusterId != a.fence.ClusterID:
		return fmt.Sprintf("renewal of cluster %q, node serves %q", m.ClusterId, a.fence.ClusterID)
	case m.Term != a.fence.Term || m.Generation != a.fence.Generation:
		return fmt.Sprintf("renewal of term %d generation %d, node applied term %d generation %d",
			m.Term, m.Generation, a.fence.Term, a.fence.Generation)
	case m.LeaseMs == 0 || m.LeaseMs > uint64(maxLease/time.Millisecond):
		return fmt.Sprintf("lease of %d ms outside (0, %v]", m.LeaseMs, maxLease)
	}
	at, ok := a.lease.sentAt(m.Echo)
	if !ok {
		return "renewal echoes none of the node's recent acks"
	}
	end := at.Add(time.Duration(m.LeaseMs) * time.Millisecond)
	if !now.Before(end) {
		return fmt.Sprintf("the ack the renewal echoes was sent %v ago, longer than the lease", now.Sub(at).Round(time.Millisecond))
	}
	if end.After(a.lease.expiry) {
		a.lease.expiry = end
	}
	return ""
}

// leaseAck is the node's answer to a renewal (refused says why it did not
// renew), or an unsolicited update: what it runs and a fresh nonce.
func (a *nodeActor) leaseAck(refused string, update bool) *pb.LeaseAck {
	now := a.cfg.Now()
	nonce := rand.Uint64()
	for nonce == 0 {
		nonce = rand.Uint64()
	}
	a.lease.acks = append(a.lease.acks, sentAck{nonce: nonce, at: now})
	if n := len(a.lease.acks); n > keptAcks {
		a.lease.acks = append(a.lease.acks[:0], a.lease.acks[n-keptAcks:]...)
	}
	ack := &pb.LeaseAck{Status: a.ack(true, "", nil), Nonce: nonce, Renewed: refused == "" && !update,
		Paused: a.lease.lapsed, Refused: refused, Update: update}
	if a.leaseValid(now) {
		ack.ValidMs = uint64(a.lease.expiry.Sub(now) / time.Millisecond)
	}
	return ack
}

// armLease makes the actor check its lease when it is due to end.
func (a *nodeActor) armLease(ctx actor.Context, now time.Time) {
	d := a.lease.expiry.Sub(now) + time.Millisecond
	if a.lease.timer != nil {
		a.lease.timer.Reset(d)
		return
	}
	sys, self := a.sys, ctx.Self()
	a.lease.timer = time.AfterFunc(d, func() { sys.Root.Send(self, leaseCheck{}) })
}

// checkLease pauses the workers if the lease has lapsed.
func (a *nodeActor) checkLease(ctx actor.Context) {
	now := a.cfg.Now()
	switch {
	case a.lease.lapsed || a.lease.expiry.IsZero():
		// Already paused, or never granted: nothing was started.
	case a.leaseValid(now):
		a.armLease(ctx, now)
	default:
		a.pause(now)
	}
}

// pause stops every live worker (SIGSTOP), and kills those already being
// stopped: resumed, they would write their final checkpoint after the
// leader may have started their successor.
func (a *nodeActor) pause(now time.Time) {
	a.lease.lapsed = true
	paused, killed := 0, 0
	for _, r := range a.runs {
		for _, w := range r.procs {
			if r.stopping {
				_ = w.Signal(syscall.SIGKILL)
				killed++
			} else {
				_ = w.Signal(syscall.SIGSTOP)
				paused++
			}
		}
	}
	log := a.cfg.Logger.Warn
	if paused+killed > 0 {
		log = a.cfg.Logger.Error
	}
	log("node: LEASE LAPSED: no renewal from the leader; workers paused until it renews the lease, "+
		"killed if it no longer wants them", "lapsed_for", now.Sub(a.lease.expiry).Round(time.Millisecond),
		"paused", paused, "killed", killed, "term", a.fence.Term, "generation", a.fence.Generation)
}

// resume continues the paused workers: the renewal just accepted is of
// the newest assignment, which still wants every run not being stopped.
func (a *nodeActor) resume() {
	a.lease.lapsed = false
	n := 0
	for _, r := range a.runs {
		if r.stopping {
			continue
		}
		for _, w := range r.procs {
			_ = w.Signal(syscall.SIGCONT)
			n++
		}
	}
	a.cfg.Logger.Warn("node: lease renewed: workers resumed", "resumed", n, "term", a.fence.Term, "generation", a.fence.Generation)
}

// stopSignal is how to stop a run's workers: SIGTERM (they checkpoint,
// SIGKILL after the grace period), or SIGKILL while the lease has lapsed.
func (a *nodeActor) stopSignal() syscall.Signal {
	if a.lease.lapsed {
		return syscall.SIGKILL
	}
	return syscall.SIGTERM
}

// tellLeader sends the leader an update of what the node runs (after a
// run's last worker ended): it may be waiting for it to start the job's
// next incarnation.
func (a *nodeActor) tellLeader(ctx actor.Context) {
	if a.lease.leader != nil {
		ctx.Send(a.lease.leader, a.leaseAck("", true))
	}
}
