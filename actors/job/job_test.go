package job

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"pollux/optimizer/goodput"
	"pollux/testbed/builtin"
)

// TestTablesAreValidBids: for every built-in application, with and
// without a model, the batch tables a job actor bids pass the state
// machine's checks (so the allocator never drops a bid of a well-behaved
// actor).
func TestTablesAreValidBids(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	params := goodput.Params{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.1, BetaR: 0.005, Gamma: 1.5}
	for _, name := range cat.Names() {
		spec := state.JobSpec{App: name, MinReplicas: 1, MaxReplicas: 64, Limits: cat[name].Limits()}
		j := &state.Job{ID: "j", Spec: spec}
		for _, most := range []int{0, 1, 3, 16, 40} {
			bound := replicaBound(spec, most)
			grad := cat[name].GradStats(float64(spec.Limits.InitBatch), 0)
			for _, model := range []*goodput.Model{nil, {Params: params, Grad: grad, Limits: spec.Limits}} {
				single, multi := tables(model, spec.Limits, grad, bound)
				b := state.Bid{Session: 1, Version: 1, HasModel: model != nil, HasGrad: true, Grad: grad, MostProfiled: most, Single: single, Multi: multi}
				if model != nil {
					b.Params = params
				}
				if err := state.CheckBid(j, &b); err != nil {
					t.Errorf("%s, profiled at %d, model %v: %v", name, most, model != nil, err)
				}
				if len(single) != bound || bound < spec.MinReplicas || bound > 2*max(most, 1) {
					t.Errorf("%s, profiled at %d: bound %d", name, most, bound)
				}
			}
		}
	}
}

// fakeStore is a server's local state for one job; it counts the reads.
type fakeStore struct {
	mu    sync.Mutex
	job   *state.Job
	reads int
}

func (f *fakeStore) LocalJob(id string) (*state.Job, state.ClusterConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.job == nil || f.job.ID != id {
		return nil, state.ClusterConfig{}
	}
	c := *f.job
	return &c, state.ClusterConfig{}
}

// ack acknowledges the measurements up to seq of session; it returns
// how many reads the store had served before.
func (f *fakeStore) ack(session, seq uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.job.MeasSession, f.job.MeasSeq = session, seq
	return f.reads
}

// waitReads waits until the store has served n reads.
func (f *fakeStore) waitReads(t *testing.T, n int) {
	t.Helper()
	reads := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.reads
	}
	if !poll.Wait(5*time.Second, func() bool { return reads() >= n }) {
		t.Fatalf("the store served %d reads in 5 s, want %d", reads(), n)
	}
}

// bidSink stands for the allocator; it answers a flush once every
// message sent to it before has been seen.
type bidSink struct{ got chan *pb.Bid }

type flush struct{}

func (s *bidSink) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.Bid:
		s.got <- m
	case flush:
		ctx.Respond(m)
	}
}

// hostFixture is a job host under test beside an allocator stand-in
// that collects its bids.
type hostFixture struct {
	sys   *actor.ActorSystem
	host  *actor.PID
	alloc *actor.PID
	sink  *bidSink
}

// startHost spawns a job host of cfg, logging nowhere, and a bidSink
// holding up to bids bids as its allocator; the actor system stops with
// the test.
func startHost(t *testing.T, cfg HostConfig, bids int) *hostFixture {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Logger = log
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	t.Cleanup(sys.Shutdown)
	sink := &bidSink{got: make(chan *pb.Bid, bids)}
	alloc := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return sink }))
	props, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &hostFixture{sys: sys, host: sys.Root.Spawn(props), alloc: alloc, sink: sink}
}

// hostJobs hands the host jobs as generation gen of term and waits for
// its acknowledgement of them all.
func (f *hostFixture) hostJobs(t *testing.T, term, gen uint64, jobs ...*pb.HostedJob) {
	t.Helper()
	res, err := f.sys.Root.RequestFuture(f.host, &pb.HostJobs{Term: term, Generation: gen,
		Allocator: &pb.Ref{Address: f.alloc.Address, Id: f.alloc.Id}, Jobs: jobs}, 5*time.Second).Result()
	if err != nil {
		t.Fatalf("host jobs: %v", err)
	}
	if ack, ok := res.(*pb.HostAck); !ok || ack.Jobs != uint32(len(jobs)) {
		t.Fatalf("host ack %v, want %d jobs", res, len(jobs))
	}
}

// owner is the PID of job id's actor.
func (f *hostFixture) owner(id string) *actor.PID {
	return actor.NewPID(f.host.Address, f.host.Id+"/job-"+id)
}

// TestJobActorBidsAndRepeatsUntilAcknowledged drives one job actor by
// hand: its first bid comes at once, measurements are numbered and
// repeated until the state acknowledges them, a done report is bid at
// once, and a report of another incarnation is not taken.
func TestJobActorBidsAndRepeatsUntilAcknowledged(t *testing.T) {
	cat, _ := builtin.Catalog()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: cat["cifar10"].Limits()}
	store := &fakeStore{job: &state.Job{ID: "j", Spec: spec, State: state.Running, Incarnation: 2}}
	var reports atomic.Int64
	f := startHost(t, HostConfig{Server: "s0", Store: store, BidEvery: 50 * time.Millisecond, Reports: &reports}, 100)
	sys, alloc, sink := f.sys, f.alloc, f.sink
	next := func() *pb.Bid {
		t.Helper()
		select {
		case b := <-sink.got:
			return b
		case <-time.After(5 * time.Second):
			t.Fatal("no bid")
			return nil
		}
	}
	f.hostJobs(t, 1, 1, &pb.HostedJob{Job: "j", Incarnation: 2, Session: 7, Nodes: 1, Replicas: 2})
	first := next()
	if first.Session != 7 || first.Incarnation != 2 || len(first.Single) != 1 || first.HasModel || len(first.Unacked) != 0 {
		t.Fatalf("first bid %v", first)
	}
	owner := f.owner("j")
	report := func(inc uint64, done bool) {
		sys.Root.Send(owner, &pb.WorkerReports{Reports: []*pb.WorkerReport{{Job: "j", Incarnation: inc, Rank: 0, StepTime: 0.2, SyncTime: 0.05,
			GradSqr: 1, GradVar: 10, Epoch: 1, Progress: 3, LocalBsz: 64, Done: done}}})
	}
	report(1, false) // an old incarnation's: not taken
	report(2, false)
	var withMeas *pb.Bid
	for withMeas == nil {
		if b := next(); len(b.Unacked) > 0 {
			withMeas = b
		}
	}
	m := withMeas.Unacked[0]
	if m.Seq != 1 || m.Incarnation != 2 || len(m.Profile) != 1 || m.Profile[0].Replicas != 2 || m.Profile[0].Count != 1 || !withMeas.HasModel {
		t.Fatalf("measurement %v in %v", m, withMeas)
	}
	if reports.Load() != 1 {
		t.Fatalf("%d reports taken, want 1 (the other was of an old incarnation)", reports.Load())
	}
	// Not acknowledged: repeated.
	for b := next(); ; b = next() {
		if len(b.Unacked) > 0 && b.Unacked[0].Seq == 1 {
			break
		}
	}
	store.ack(7, 1)
	report(2, true) // done: bid at once, the first measurement dropped
	for b := next(); ; b = next() {
		if b.Done {
			for _, u := range b.Unacked {
				if u.Seq <= 1 {
					t.Fatalf("acknowledged measurement repeated: %v", b)
				}
			}
			break
		}
	}
	// Another actor's session takes over: this one stops bidding. A tick
	// reads the store twice, so two reads after the ack include one at
	// the start of a tick, which sees the newer session; a bid of the
	// tick before was in the sink's mailbox by then, and the flush lets
	// the sink pass it on before the channel is drained.
	store.waitReads(t, store.ack(9, 1)+2)
	if _, err := sys.Root.RequestFuture(alloc, flush{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	for len(sink.got) > 0 {
		<-sink.got
	}
	// Nothing within six bid intervals.
	select {
	case b := <-sink.got:
		t.Fatalf("bid after another session took over: %v", b)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestJobActorResumesPerTypeModels: an actor started on a server whose
// state holds the job's profile on two GPU types and a bid with a part
// per type (as after its previous server died) bids both types' models
// at once, as they were, without mixing them.
func TestJobActorResumesPerTypeModels(t *testing.T) {
	cat, _ := builtin.Catalog()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: cat["cifar10"].Limits()}
	truth := goodput.Params{AlphaC: 0.02, BetaC: 0.0004, AlphaN: 0.2, BetaN: 0.01, AlphaR: 0.05, BetaR: 0.004, Gamma: 1.3}
	slow := truth
	slow.AlphaC, slow.BetaC = 2*truth.AlphaC, 2*truth.BetaC
	profiles := map[string]*typeProfile{
		"a100": profileFrom("a100", truth, 4, profileKey{1, 1, 128}, profileKey{1, 2, 256}),
		"t4":   profileFrom("t4", slow, 9, profileKey{1, 1, 128}, profileKey{1, 2, 256}),
	}
	fitted(t, profiles)
	grad := goodput.GradStats{GradSqr: 1, GradVar: 10}
	bid := bidOn(spec, profiles, grad, true)
	bid.Session, bid.Version = 3, 5
	var prof []state.ProfileEntry
	for _, typ := range []string{"a100", "t4"} {
		for _, key := range []profileKey{{1, 1, 128}, {1, 2, 256}} {
			prof = append(prof, profiles[typ].entries[key])
		}
	}
	store := &fakeStore{job: &state.Job{ID: "j", Spec: spec, State: state.Running, Incarnation: 4, Profile: prof,
		Bid: bid, MeasSession: 3, MeasSeq: 2}}
	var fits atomic.Int64
	f := startHost(t, HostConfig{Server: "s1", Store: store, BidEvery: 50 * time.Millisecond, Fits: &fits}, 100)
	sink := f.sink
	f.hostJobs(t, 2, 9, &pb.HostedJob{Job: "j", Incarnation: 4, Session: 8, Nodes: 1, Replicas: 2, GpuType: "t4"})
	var first *pb.Bid
	select {
	case first = <-sink.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no bid")
	}
	if len(first.Types) != 2 || first.Types[0].GpuType != "a100" || first.Types[1].GpuType != "t4" {
		t.Fatalf("first bid's parts %v", first.Types)
	}
	for i, typ := range []string{"a100", "t4"} {
		if got := goodput.ParamsFrom([7]float64(first.Types[i].Params)); got != profiles[typ].params {
			t.Errorf("%s model %+v, the state's is %+v", typ, got, profiles[typ].params)
		}
	}
	// The top-level model is the type measured most (t4), and nothing
	// was refitted: the state's models were whole.
	if got := goodput.ParamsFrom([7]float64(first.Params)); got != profiles["t4"].params || fits.Load() != 0 {
		t.Errorf("top-level model %+v (t4's %+v), %d fits", got, profiles["t4"].params, fits.Load())
	}
	// A report of the incarnation, on t4, at a new local batch: measured
	// and refitted under t4 only.
	f.sys.Root.Send(f.owner("j"), &pb.WorkerReports{Reports: []*pb.WorkerReport{{Job: "j", Incarnation: 4, Rank: 0, StepTime: 0.5, SyncTime: 0.05,
		GradSqr: 1, GradVar: 10, Epoch: 1, Progress: 3, LocalBsz: 64}}})
	deadline := time.After(5 * time.Second)
	for {
		var b *pb.Bid
		select {
		case b = <-sink.got:
		case <-deadline:
			t.Fatal("no bid with the new measurement and a refitted t4 model")
		}
		if len(b.Unacked) == 0 || len(b.Types) != 2 {
			continue
		}
		if m := b.Unacked[0]; m.GpuType != "t4" || m.Incarnation != 4 || m.Profile[0].LocalBsz != 64 {
			t.Fatalf("measurement %v", m)
		}
		a100, t4 := goodput.ParamsFrom([7]float64(b.Types[0].Params)), goodput.ParamsFrom([7]float64(b.Types[1].Params))
		if a100 != profiles["a100"].params {
			t.Fatalf("a t4 measurement changed the a100 model: %+v", a100)
		}
		if t4 != profiles["t4"].params {
			return // refitted with the new point
		}
	}
}

// fakeClock is an injected clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestJobActorMeasuresRestartDelay: the actor measures a restart from
// the old incarnation's last step to the new one's first and a start
// from no workers from its placement to its first step (not the first
// placement an actor sees: it may have taken over running workers), bids
// the mean, and does not count the wait of a preempted job.
func TestJobActorMeasuresRestartDelay(t *testing.T) {
	cat, _ := builtin.Catalog()
	spec := state.JobSpec{App: "cifar10", MinReplicas: 1, MaxReplicas: 8, Limits: cat["cifar10"].Limits()}
	store := &fakeStore{job: &state.Job{ID: "j", Spec: spec, State: state.Running, Incarnation: 1}}
	clock := &fakeClock{now: time.Unix(1000, 0)}
	f := startHost(t, HostConfig{Server: "s0", Store: store, BidEvery: 20 * time.Millisecond, Now: clock.Now}, 1000)
	sys, sink, owner := f.sys, f.sink, f.owner("j")
	gen := uint64(0)
	place := func(inc uint64, reps uint32) {
		t.Helper()
		gen++
		f.hostJobs(t, 1, gen, &pb.HostedJob{Job: "j", Incarnation: inc, Session: 7, Nodes: 1, Replicas: reps})
	}
	step := func(inc uint64) {
		sys.Root.Send(owner, &pb.WorkerReports{Reports: []*pb.WorkerReport{{Job: "j", Incarnation: inc, Rank: 0, StepTime: 0.2, SyncTime: 0.05,
			GradSqr: 1, GradVar: 10, Epoch: 1, Progress: 3, LocalBsz: 64}}})
	}
	// waitDelay waits for a bid with the restart delay want, the
	// reports sent before taken (a bid counts them).
	waitDelay := func(want float64, reports uint64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case b := <-sink.got:
				if b.Reports < reports {
					continue
				}
				if b.RestartDelay == want {
					return
				}
				if b.RestartDelay != 0 && b.RestartDelay != want {
					t.Fatalf("bid with restart delay %v, want %v", b.RestartDelay, want)
				}
			case <-deadline:
				t.Fatalf("no bid with restart delay %v", want)
			}
		}
	}
	// waitReports waits for a bid that counts reports reports and returns
	// its restart delay.
	waitReports := func(reports uint64) float64 {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case b := <-sink.got:
				if b.Reports >= reports {
					return b.RestartDelay
				}
			case <-deadline:
				t.Fatalf("no bid counting %d reports", reports)
			}
		}
	}
	place(1, 1)
	step(1)
	waitDelay(0, 1)
	clock.add(2 * time.Second)
	step(1) // the old incarnation's last step
	waitDelay(0, 2)
	place(2, 2)
	clock.add(6 * time.Second)
	step(2) // 6 s after the last step of incarnation 1
	waitDelay(6, 3)
	place(3, 1)
	clock.add(10 * time.Second)
	step(3)
	waitDelay(8, 4) // the mean of 6 and 10
	// Preempted, then placed again a minute later: the wait is not a
	// restart's, the start from no workers (up to 5 s: the actor may
	// take the placement after the clock moved) is.
	place(4, 0)
	clock.add(time.Minute)
	place(5, 1)
	clock.add(5 * time.Second)
	step(5)
	if d := waitReports(5); d < (6+10+0)/3.0 || d > (6+10+5)/3.0 {
		t.Fatalf("restart delay %v after a start from none, want the mean of 6, 10 and at most 5", d)
	}
}
