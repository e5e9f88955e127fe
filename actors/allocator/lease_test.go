package allocator_test

import (
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"pollux/actors/allocator"
	"pollux/actors/node"
	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"pollux/optimizer"
)

// netState is what the lease tests do to the cluster's network and see
// of its workers: nodes gone from the membership, nodes cut off (every
// message to and from them lost), when each node last sent a lease ack
// that went through, and every worker with the signals it got.
type netState struct {
	gone, cut map[string]bool
	lastAck   map[string]time.Time
	acks      map[string]int // lease acks that went through, by node
	renews    map[string]int // lease renewals received, by node
	// garble, by node: its lease acks reach the leader with a nonce it
	// never made, so that it refuses every renewal.
	garble  map[string]bool
	workers []*workerRec
}

// workerRec is one worker as an observer outside the node sees it.
type workerRec struct {
	node    string
	job     string
	inc     uint64
	started time.Time
	mu      sync.Mutex
	sigs    []syscall.Signal
	at      []time.Time
}

func (w *workerRec) String() string { return fmt.Sprintf("%s/%d on %s", w.job, w.inc, w.node) }

// signalled is when w first got sig (zero if never).
func (w *workerRec) signalled(sig syscall.Signal) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i := slices.Index(w.sigs, sig); i >= 0 {
		return w.at[i]
	}
	return time.Time{}
}

func (w *workerRec) signals() []syscall.Signal {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sigs)
}

type watchedWorker struct {
	node.Worker
	rec *workerRec
}

func (w watchedWorker) Signal(sig syscall.Signal) error {
	w.rec.mu.Lock()
	w.rec.sigs, w.rec.at = append(w.rec.sigs, sig), append(w.rec.at, time.Now())
	w.rec.mu.Unlock()
	return w.Worker.Signal(sig)
}

// watchLaunch records the workers node name starts and their signals.
func (c *tcluster) watchLaunch(name string, launch node.Launcher) node.Launcher {
	return func(s node.WorkerSpec) (node.Worker, error) {
		w, err := launch(s)
		if err != nil {
			return nil, err
		}
		rec := &workerRec{node: name, job: s.Env.JobID, inc: s.Env.Incarnation, started: time.Now()}
		c.mu.Lock()
		c.net.workers = append(c.net.workers, rec)
		c.mu.Unlock()
		return watchedWorker{Worker: w, rec: rec}, nil
	}
}

// cutIn loses what the servers send node name while it is cut off.
func (c *tcluster) cutIn(name string) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
			switch env.Message.(type) {
			case *pb.Assign, *pb.LeaseRenew:
				c.mu.Lock()
				cut := c.net.cut[name]
				if _, renew := env.Message.(*pb.LeaseRenew); renew && !cut {
					if c.net.renews == nil {
						c.net.renews = map[string]int{}
					}
					c.net.renews[name]++
				}
				c.mu.Unlock()
				if cut {
					return
				}
			}
			next(ctx, env)
		}
	}
}

// cutOut loses what node name sends while it is cut off.
func (c *tcluster) cutOut(name string) actor.SenderMiddleware {
	return func(next actor.SenderFunc) actor.SenderFunc {
		return func(ctx actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
			c.mu.Lock()
			cut := c.net.cut[name]
			if m, ok := env.Message.(*pb.LeaseAck); ok && c.net.garble[name] {
				g := proto.Clone(m).(*pb.LeaseAck)
				g.Nonce = m.Nonce ^ 1
				env = &actor.MessageEnvelope{Header: env.Header, Message: g, Sender: env.Sender}
			}
			if _, ok := env.Message.(*pb.LeaseAck); ok && !cut {
				if c.net.lastAck == nil {
					c.net.lastAck, c.net.acks = map[string]time.Time{}, map[string]int{}
				}
				c.net.lastAck[name] = time.Now()
				c.net.acks[name]++
			}
			c.mu.Unlock()
			if !cut {
				next(ctx, target, env)
			}
		}
	}
}

// partition cuts node name off and takes it out of the membership (or
// back in, heal).
func (c *tcluster) partition(name string, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.net.cut == nil {
		c.net.cut, c.net.gone = map[string]bool{}, map[string]bool{}
	}
	c.net.cut[name], c.net.gone[name] = cut, cut
}

// waitWorker waits for a worker that match accepts.
func (c *tcluster) waitWorker(what string, d time.Duration, match func(*workerRec) bool) *workerRec {
	c.t.Helper()
	var out *workerRec
	poll.Until(c.t, d, what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, w := range c.net.workers {
			if match(w) {
				out = w
				return true
			}
		}
		return false
	})
	return out
}

// replacedAfterCut cuts off the node running job j's first worker, then
// waits for a worker of a newer incarnation elsewhere. It returns the
// two, when the cut began and when the node last sent a lease ack.
func replacedAfterCut(t *testing.T, c *tcluster, beforeCut func()) (first, second *workerRec, cutAt, lastAck time.Time) {
	t.Helper()
	c.submit("j", "cifar10", 1)
	first = c.waitWorker("job j's first worker", 30*time.Second, func(w *workerRec) bool { return w.job == "j" })
	// Some renewals of its lease.
	c.mu.Lock()
	acks := c.net.acks[first.node]
	c.mu.Unlock()
	poll.Until(t, 20*time.Second, "renewals of the lease of "+first.node, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.net.acks[first.node] >= acks+3
	})
	if beforeCut != nil {
		beforeCut()
	}
	cutAt = time.Now()
	c.partition(first.node, true)
	second = c.waitWorker("job j restarted on another node", 30*time.Second, func(w *workerRec) bool {
		return w.job == "j" && w.inc > first.inc && w.node != first.node
	})
	c.mu.Lock()
	lastAck = c.net.lastAck[first.node]
	c.mu.Unlock()
	return first, second, cutAt, lastAck
}

// TestCutOffNodePausesBeforeItsJobStartsElsewhere: a node cut off from
// the control plane pauses its worker when its lease lapses, and the
// leader, which marks it dead at once (a node grace of 100 ms), starts
// the job's next incarnation elsewhere only after the node's lease and
// margin have passed since the last lease ack it sent; once the network
// heals the paused worker is killed, never terminated (it would write a
// checkpoint).
func TestCutOffNodePausesBeforeItsJobStartsElsewhere(t *testing.T) {
	lease := time.Second
	c := newTCluster(t, clusterOpts{servers: 3, nodes: 2, gpus: 1, timeScale: 100, nodeGrace: 100 * time.Millisecond, lease: lease})
	first, second, cutAt, lastAck := replacedAfterCut(t, c, nil)
	wait := lease + allocator.LeaseMargin(lease)
	t.Logf("cut at +0; last lease ack sent at %v; paused at %v; restarted elsewhere at %v", lastAck.Sub(cutAt),
		first.signalled(syscall.SIGSTOP).Sub(cutAt), second.started.Sub(cutAt))
	if lastAck.IsZero() || second.started.Before(lastAck.Add(wait)) {
		t.Errorf("incarnation %d started %v after the cut node's last lease ack, before its lease and margin (%v)",
			second.inc, second.started.Sub(lastAck), wait)
	}
	if stop := first.signalled(syscall.SIGSTOP); stop.IsZero() || !stop.Before(second.started) {
		t.Errorf("the cut-off worker %v was not paused before its successor started: signals %v", first, first.signals())
	}
	c.partition(first.node, false)
	poll.Until(t, 20*time.Second, "the paused worker killed once the network heals", func() bool {
		return !first.signalled(syscall.SIGKILL).IsZero()
	})
	if s := first.signals(); slices.Contains(s, syscall.SIGTERM) || slices.Contains(s, syscall.SIGCONT) {
		t.Errorf("the superseded worker got %v: it must be killed without SIGTERM, never resumed", s)
	}
}

// TestNewLeaderWaitsForItsPredecessorsLeases: the leader dies as a node
// is cut off; the new leader does not know what leases its predecessor
// granted, and restarts the cut-off node's job elsewhere only after the
// lease and margin from its own election.
func TestNewLeaderWaitsForItsPredecessorsLeases(t *testing.T) {
	lease := time.Second
	c := newTCluster(t, clusterOpts{servers: 3, nodes: 2, gpus: 1, timeScale: 100, nodeGrace: 100 * time.Millisecond, lease: lease})
	var killed time.Time
	first, second, _, _ := replacedAfterCut(t, c, func() {
		killed = time.Now()
		c.kill(c.leader())
	})
	wait := lease + allocator.LeaseMargin(lease)
	t.Logf("leader killed at +0; paused at %v; restarted elsewhere at %v", first.signalled(syscall.SIGSTOP).Sub(killed),
		second.started.Sub(killed))
	if second.started.Sub(killed) < wait {
		t.Errorf("the new leader started incarnation %d %v after the old leader died, before the lease and margin (%v)",
			second.inc, second.started.Sub(killed), wait)
	}
	if stop := first.signalled(syscall.SIGSTOP); stop.IsZero() || !stop.Before(second.started) {
		t.Errorf("the cut-off worker %v was not paused before its successor started: signals %v", first, first.signals())
	}
}

// TestNewLeaderKeepsWhatItsPredecessorStarted: a new leader has no ack
// yet when it first assigns; it must hold, not stop, the incarnations
// already running (an earlier leader let them start), or the nodes stop
// them and refuse to run them again. With a single failure allowed, one
// such refusal would fail the job.
func TestNewLeaderKeepsWhatItsPredecessorStarted(t *testing.T) {
	c := newTCluster(t, clusterOpts{servers: 5, nodes: 2, gpus: 2, timeScale: 100, maxFailures: 1})
	c.submit("j", "cifar10", 4)
	// An incarnation beyond the first (the job grew), running.
	w := c.waitWorker("a worker of a second incarnation", 30*time.Second, func(w *workerRec) bool { return w.job == "j" && w.inc >= 2 })
	c.waitRounds("rounds with the worker running", c.roundMark(), 2, nil)
	for range 2 {
		old := c.leader()
		term, _ := old.srv.Leadership()
		mark := c.roundMark()
		c.kill(old)
		c.waitRounds("rounds of the next leader", mark, 2, func(r allocator.RoundInfo) bool { return r.Term > term })
	}
	st := c.waitAll(60*time.Second, "j")
	if j := st.Jobs["j"]; j.State != state.Completed {
		t.Fatalf("job %v after two leader kills (incarnation %d was running): %s", j.State, w.inc, j.Reason)
	}
}

// renewalCounts waits until each of nodes n0... has received a lease
// renewal, and returns a function that counts the renewals each node
// has received.
func (c *tcluster) renewalCounts(t *testing.T, nodes int) func() map[string]int {
	t.Helper()
	counts := func() map[string]int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return maps(c.net.renews)
	}
	poll.Until(t, 30*time.Second, "renewals of every node", func() bool {
		n := counts()
		for i := range nodes {
			if n[fmt.Sprintf("n%d", i)] == 0 {
				return false
			}
		}
		return true
	})
	return counts
}

// TestRefusedRenewalsRenewOnlyThatNode: a node that refuses every
// renewal (its acks reach the leader with nonces it never made) asks
// for a renewal with each answer; the leader renews that node again,
// not every node: the others get the tick's renewals only. (Renewing
// every node for each such answer made hundreds of nodes' renewals and
// answers feed each other.)
func TestRefusedRenewalsRenewOnlyThatNode(t *testing.T) {
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 4, gpus: 1, lease: 400 * time.Millisecond})
	c.mu.Lock()
	c.net.garble = map[string]bool{"n0": true}
	c.mu.Unlock()
	counts := c.renewalCounts(t, 4)
	before := counts()
	poll.Until(t, 60*time.Second, "40 renewals of the refusing node", func() bool { return counts()["n0"] >= before["n0"]+40 })
	after := counts()
	refusing := after["n0"] - before["n0"]
	for _, n := range []string{"n1", "n2", "n3"} {
		if got := after[n] - before[n]; got > refusing/2 {
			t.Errorf("%s got %d renewals while the refusing node got %d: renewals for it go to every node", n, got, refusing)
		}
	}
	t.Logf("renewals in the window: refusing node %d, others %d, %d, %d", refusing,
		after["n1"]-before["n1"], after["n2"]-before["n2"], after["n3"]-before["n3"])
}

// stalledPolicy is Pollux's policy whose searches wait, once armed,
// until released: a search far longer than the agents' lease.
type stalledPolicy struct {
	optimizer.Policy
	mu      sync.Mutex
	armed   bool
	stalled chan struct{} // closed when an armed search waits
	release chan struct{}
}

func (p *stalledPolicy) Allocate(s *optimizer.Snapshot, prev *optimizer.State) (optimizer.Result, error) {
	p.mu.Lock()
	armed := p.armed
	p.armed = false
	p.mu.Unlock()
	if armed {
		close(p.stalled)
		<-p.release
	}
	return p.Policy.Allocate(s, prev)
}

// TestLeasesRenewedDuringALongSearch: while a round's search runs for
// longer than the agents' lease, the leader goes on renewing the
// leases, so the node's worker is not paused.
func TestLeasesRenewedDuringALongSearch(t *testing.T) {
	lease := 400 * time.Millisecond
	pol := &stalledPolicy{Policy: optimizer.NewPollux(), stalled: make(chan struct{}), release: make(chan struct{})}
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 1, gpus: 1, timeScale: 10, lease: lease,
		policy: func() optimizer.Policy { return pol }})
	c.submit("j", "imagenet", 1)
	w := c.waitWorker("job j's worker", 30*time.Second, func(w *workerRec) bool { return w.job == "j" })
	renews := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.net.renews["n0"]
	}
	poll.Until(t, 20*time.Second, "renewals of the node's lease", func() bool { return renews() >= 3 })
	pol.mu.Lock()
	pol.armed = true
	pol.mu.Unlock()
	released := false
	defer func() {
		if !released {
			close(pol.release)
		}
	}()
	select {
	case <-pol.stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("no search within 30 s")
	}
	before := renews()
	// Ten renewal periods of a search: the lease (four periods) would
	// have lapsed without renewals.
	ok := poll.Wait(20*time.Second, func() bool { return renews() >= before+10 })
	close(pol.release)
	released = true
	if !ok {
		t.Fatalf("%d lease renewals while the search ran, want 10", renews()-before)
	}
	if s := w.signals(); slices.Contains(s, syscall.SIGSTOP) {
		t.Errorf("the worker was paused during the search: signals %v", s)
	}
}

// TestNodesThatMissedARoundGetItAgain: every node loses the Assign of
// one round; their next lease acks show them behind, and the leader
// sends each the round's assignment again (one batch for all of them)
// long before the next round would have brought them up to date.
func TestNodesThatMissedARoundGetItAgain(t *testing.T) {
	const nodes = 4
	c := newTCluster(t, clusterOpts{servers: 1, nodes: nodes, gpus: 1, interval: 4 * time.Second, lease: 300 * time.Millisecond})
	for i := range nodes {
		c.submit(fmt.Sprintf("j%d", i), "imagenet", 1)
	}
	c.workerOnEveryNode(t, nodes)
	var lost uint64 // the generation whose Assigns are lost
	c.drop("assign", nodes, func(m any) bool {
		if as := m.(*pb.Assign); lost == 0 || as.Generation == lost {
			lost = as.Generation
			return true
		}
		return false
	})
	poll.Until(t, 30*time.Second, "every node's Assign of one round lost", func() bool { return c.dropped("assign") == nodes })
	c.mu.Lock()
	gen := lost
	c.mu.Unlock()
	poll.Until(t, 30*time.Second, "every node up to date", func() bool {
		for i := range nodes {
			if c.nodeStatus(i).Generation < gen {
				return false
			}
		}
		return true
	})
	for i := range nodes {
		if got := c.nodeStatus(i).Generation; got != gen {
			t.Errorf("node %d is at generation %d, not the lost round's %d: the next round, not a resend, brought it up to date", i, got, gen)
		}
	}
}

// TestSlowAcksBringNoResends: when the nodes' answers take longer than
// a renewal period, the answers to renewals sent before a round's
// Assign arrive after it showing the node behind; the Assign is on its
// way, not lost, and is not sent again. (Before the leader told these
// apart by the order of a node's answers, every such answer made it
// send the round's Assign a second time.)
func TestSlowAcksBringNoResends(t *testing.T) {
	const nodes = 4
	c := newTCluster(t, clusterOpts{servers: 1, nodes: nodes, gpus: 1, interval: time.Second, lease: 600 * time.Millisecond})
	for i := range nodes {
		c.submit(fmt.Sprintf("j%d", i), "imagenet", 1)
	}
	c.workerOnEveryNode(t, nodes)
	// Answers take 300 ms: twice the 150 ms renewal period, so some
	// answer sent before each round's Assign arrives a renewal period
	// after it, and within the lease.
	c.delay("ack", 300*time.Millisecond)
	var from uint64
	poll.Until(t, 30*time.Second, "a round with the answers slow", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for g := range c.assigns {
			from = max(from, g)
		}
		return from > 0
	})
	from++ // the first round sent wholly with slow answers
	poll.Until(t, 30*time.Second, "three more rounds", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.assigns[from+3] > 0
	})
	time.Sleep(500 * time.Millisecond) // any resend of the last counted round
	c.mu.Lock()
	defer c.mu.Unlock()
	for g := from; g <= from+2; g++ {
		if c.assigns[g] != nodes {
			t.Errorf("generation %d: %d Assigns sent to %d nodes, want one each", g, c.assigns[g], nodes)
		}
	}
}

// workerOnEveryNode waits until each of the nodes runs a worker.
func (c *tcluster) workerOnEveryNode(t *testing.T, nodes int) {
	t.Helper()
	poll.Until(t, 60*time.Second, "a worker on every node", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		on := map[string]bool{}
		for _, w := range c.net.workers {
			on[w.node] = true
		}
		return len(on) == nodes
	})
}

// TestRoundTimesSayWhereTheyGo holds every answer 300 ms: a round's
// times then put the 300 ms between its last Assign sent and its acks,
// in order (decided, sent, median ack, last ack).
func TestRoundTimesSayWhereTheyGo(t *testing.T) {
	const nodes, slow = 3, 300 * time.Millisecond
	c := newTCluster(t, clusterOpts{servers: 1, nodes: nodes, gpus: 1, interval: time.Second, lease: 2 * slow})
	for i := range nodes {
		c.submit(fmt.Sprintf("j%d", i), "imagenet", 1)
	}
	c.workerOnEveryNode(t, nodes)
	c.delay("ack", slow)
	mark := c.roundMark()
	c.waitRounds("two rounds acked by every node after the delay", mark, 3, func(r allocator.RoundInfo) bool { return r.Acked == nodes })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.rounds[mark+1:] { // the first may have been sent before the delay
		if !r.Committed || r.Acked != nodes {
			continue
		}
		if !(r.Decided <= r.Sent && r.Sent+slow <= r.AckMedian && r.AckMedian <= r.Duration) {
			t.Errorf("generation %d: decided %v, sent %v, median ack %v, last ack %v: want them in order with the %v delay between sent and the median ack",
				r.Generation, r.Decided, r.Sent, r.AckMedian, r.Duration, slow)
		}
	}
}

// TestSlowTripsBringNoFastRenewals: when the nodes' answers take longer
// than the lease, every renewal is refused (the ack it echoes is a lease
// old when it arrives); the leader then renews on its ticks only (one a
// quarter lease), not up to fastRenewals more on each answer, which
// would only add messages to an overloaded network.
func TestSlowTripsBringNoFastRenewals(t *testing.T) {
	const lease = 400 * time.Millisecond
	// Rounds far apart, so that the nodes are up to date between them.
	c := newTCluster(t, clusterOpts{servers: 1, nodes: 2, gpus: 1, lease: lease, interval: time.Minute})
	counts := c.renewalCounts(t, 2)
	c.delay("ack", 500*time.Millisecond)
	time.Sleep(2 * time.Second) // the answers sent before the delay are in
	before, t0 := counts(), time.Now()
	time.Sleep(3 * time.Second)
	after, window := counts(), time.Since(t0)
	ticks := int(window / (lease / 4))
	for _, n := range []string{"n0", "n1"} {
		got := after[n] - before[n]
		t.Logf("%s: %d renewals in %v (%d ticks)", n, got, window.Round(time.Millisecond), ticks)
		if got > ticks*3/2 {
			t.Errorf("%s got %d renewals in %v, more than 1.5 a tick (%d ticks): fast renewals to a node whose answers take longer than the lease",
				n, got, window.Round(time.Millisecond), ticks)
		}
	}
}
