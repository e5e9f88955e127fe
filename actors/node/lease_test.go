package node

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pollux/actors/pb"
	"pollux/internal/poll"
)

// fakeClock is the lease's injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeProc is an in-process worker that records the signals it gets. It
// exits on SIGKILL, and on SIGTERM unless its application is
// "stubborn".
type fakeProc struct {
	pid      int
	job      string
	stubborn bool
	mu       sync.Mutex
	sigs     []syscall.Signal
	done     chan struct{}
	exit     Exit
}

func (p *fakeProc) Pid() int { return p.pid }

func (p *fakeProc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sigs = append(p.sigs, sig)
	select {
	case <-p.done:
		return nil
	default:
	}
	switch {
	case sig == syscall.SIGKILL:
		p.exit = Exit{Code: -1, Signal: syscall.SIGKILL}
		close(p.done)
	case sig == syscall.SIGTERM && !p.stubborn:
		close(p.done)
	}
	return nil
}

func (p *fakeProc) Wait() Exit {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

func (p *fakeProc) signals() []syscall.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sigs)
}

// fakeLauncher starts fakeProcs.
type fakeLauncher struct {
	mu    sync.Mutex
	procs []*fakeProc
}

func (l *fakeLauncher) launch(s WorkerSpec) (Worker, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &fakeProc{pid: 1000 + len(l.procs), job: s.Env.JobID, stubborn: s.App == "stubborn", done: make(chan struct{})}
	l.procs = append(l.procs, p)
	return p, nil
}

func (l *fakeLauncher) started() []*fakeProc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.procs)
}

// newLeaseFixture is a node whose workers are fakeProcs (or real
// processes, with a nil launcher) and whose lease runs on clock.
func newLeaseFixture(t *testing.T, gpus int, l *fakeLauncher, clock *fakeClock) *fixture {
	t.Helper()
	f := &fixture{t: t, gpus: gpus, grace: time.Minute, now: clock.now}
	if l != nil {
		f.launch = l.launch
	}
	f.init()
	return f
}

// check makes the node look at its lease now, and waits until it has.
func (f *fixture) check() {
	f.t.Helper()
	f.sys.Root.Send(f.node.PID(), leaseCheck{})
	f.status() // processed after the check
}

// renewAt renews the lease echoing the given nonce.
func (f *fixture) renewAt(gen uint64, lease time.Duration, echo uint64) *pb.LeaseAck {
	f.t.Helper()
	return f.renewOnce(&pb.LeaseRenew{ClusterId: f.cluster, Term: f.term, Generation: gen, LeaseMs: uint64(lease / time.Millisecond), Echo: echo})
}

func TestNoWorkerStartsWithoutALease(t *testing.T) {
	l, clock := &fakeLauncher{}, newFakeClock()
	f := newLeaseFixture(t, 2, l, clock)
	ack := f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 1, Runs: []*pb.RunJob{f.run("a", 1, 2, "serve")}})
	if !ack.Ok || len(ack.Runs) != 1 || !ack.Runs[0].Pending {
		t.Fatalf("ack %v: want the run pending", ack)
	}
	// A renewal that echoes nothing the node sent renews nothing ...
	first := f.renewAt(1, 2*time.Second, 0)
	if first.Renewed || !strings.Contains(first.Refused, "echoes none") || len(l.started()) != 0 {
		t.Fatalf("renewal without echo: %v, %d workers", first, len(l.started()))
	}
	// ... one echoing its ack does, and the workers start.
	if ack := f.renewAt(1, 2*time.Second, first.Nonce); !ack.Renewed || ack.ValidMs != 2000 {
		t.Fatalf("renewal: %v", ack)
	}
	poll.Until(t, 5*time.Second, "two workers", func() bool { return len(l.started()) == 2 })
}

func TestLeaseRunsFromTheEchoedAckAndLapsePausesWorkers(t *testing.T) {
	l, clock := &fakeLauncher{}, newFakeClock()
	f := newLeaseFixture(t, 2, l, clock)
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 1, Runs: []*pb.RunJob{f.run("a", 1, 2, "serve")}})
	sent := f.renewAt(1, 2*time.Second, 0) // its ack is made at t0
	clock.advance(time.Second)
	// Arriving a second later, the renewal still runs from t0.
	if ack := f.renewAt(1, 2*time.Second, sent.Nonce); !ack.Renewed || ack.ValidMs != 1000 {
		t.Fatalf("renewal: %v, want a lease valid for 1000 ms more", ack)
	}
	poll.Until(t, 5*time.Second, "two workers", func() bool { return len(l.started()) == 2 })
	clock.advance(999 * time.Millisecond)
	f.check()
	for _, p := range l.started() {
		if s := p.signals(); len(s) != 0 {
			t.Fatalf("worker signalled %v before the lease lapsed", s)
		}
	}
	clock.advance(time.Millisecond)
	f.check()
	for _, p := range l.started() {
		if s := p.signals(); !slices.Equal(s, []syscall.Signal{syscall.SIGSTOP}) {
			t.Fatalf("worker got %v at the lapse, want SIGSTOP", s)
		}
	}
	if !strings.Contains(f.log.String(), "LEASE LAPSED") {
		t.Errorf("no loud log line: %s", f.log.String())
	}
	// The next renewal of the same assignment resumes them.
	ack := f.renewAt(1, 2*time.Second, 0)
	if ack.Renewed || !ack.Paused {
		t.Fatalf("renewal without echo while paused: %v", ack)
	}
	if ack := f.renewAt(1, 2*time.Second, ack.Nonce); !ack.Renewed || ack.Paused {
		t.Fatalf("renewal: %v", ack)
	}
	for _, p := range l.started() {
		if s := p.signals(); !slices.Equal(s, []syscall.Signal{syscall.SIGSTOP, syscall.SIGCONT}) {
			t.Fatalf("worker got %v, want SIGSTOP then SIGCONT", s)
		}
	}
	if n := strings.Count(f.log.String(), "LEASE LAPSED"); n != 1 {
		t.Errorf("%d lapse lines, want 1", n)
	}
}

func TestSupersededPausedRunIsKilledNeverTerminated(t *testing.T) {
	l, clock := &fakeLauncher{}, newFakeClock()
	f := newLeaseFixture(t, 2, l, clock)
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 1, Runs: []*pb.RunJob{f.run("a", 1, 2, "serve")}})
	f.renewAt(1, 2*time.Second, f.renewAt(1, 2*time.Second, 0).Nonce)
	poll.Until(t, 5*time.Second, "two workers", func() bool { return len(l.started()) == 2 })
	clock.advance(2 * time.Second)
	f.check()
	// Cut off, the node missed the leader's move of job a elsewhere; the
	// next assignment it gets no longer lists it and starts job b, which
	// waits for a renewal.
	ack := f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 5, Runs: []*pb.RunJob{f.run("b", 1, 1, "serve")}})
	if !ack.Ok {
		t.Fatal(ack.Error)
	}
	poll.Until(t, 5*time.Second, "job a's workers to end", func() bool {
		a := runStatus(f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 5, Runs: []*pb.RunJob{f.run("b", 1, 1, "serve")}}), "a", 1)
		return a == nil
	})
	for _, p := range l.started() {
		if s := p.signals(); !slices.Equal(s, []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL}) {
			t.Fatalf("superseded worker got %v, want SIGSTOP then SIGKILL (never SIGTERM)", s)
		}
	}
	if n := len(l.started()); n != 2 {
		t.Fatalf("%d workers started without a lease, want only job a's 2", n)
	}
	// A renewal of an older generation does not resume anything.
	if ack := f.renewAt(1, 2*time.Second, f.nonce); ack.Renewed || !strings.Contains(ack.Refused, "generation 1") {
		t.Fatalf("renewal of the old generation: %v", ack)
	}
	f.renewAt(5, 2*time.Second, f.renewAt(5, 2*time.Second, 0).Nonce)
	poll.Until(t, 5*time.Second, "job b's worker", func() bool { return len(l.started()) == 3 })
	if p := l.started()[2]; p.job != "b" {
		t.Fatalf("started %s", p.job)
	}
}

func TestRunBeingStoppedIsKilledAtTheLapse(t *testing.T) {
	l, clock := &fakeLauncher{}, newFakeClock()
	f := newLeaseFixture(t, 2, l, clock)
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 1, Runs: []*pb.RunJob{f.run("a", 1, 1, "stubborn"), f.run("b", 1, 1, "serve")}})
	f.renewAt(1, 2*time.Second, f.renewAt(1, 2*time.Second, 0).Nonce)
	poll.Until(t, 5*time.Second, "two workers", func() bool { return len(l.started()) == 2 })
	// a is stopped (it ignores SIGTERM while it writes its checkpoint) ...
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 2, Runs: []*pb.RunJob{f.run("b", 1, 1, "serve")}})
	// ... when the lease lapses: resumed later, it would checkpoint
	// after its successor started elsewhere. It is killed.
	clock.advance(2 * time.Second)
	f.check()
	want := map[string][]syscall.Signal{"a": {syscall.SIGTERM, syscall.SIGKILL}, "b": {syscall.SIGSTOP}}
	for _, p := range l.started() {
		if s := p.signals(); !slices.Equal(s, want[p.job]) {
			t.Errorf("job %s's worker got %v, want %v", p.job, s, want[p.job])
		}
	}
}

func TestRenewalsThatDoNotRenew(t *testing.T) {
	clock := newFakeClock()
	f := newLeaseFixture(t, 1, &fakeLauncher{}, clock)
	f.term = 3
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: 3, Generation: 7})
	nonce := f.renewAt(7, time.Second, 0).Nonce
	for _, c := range []struct {
		name string
		m    *pb.LeaseRenew
		want string
	}{
		{"other cluster", &pb.LeaseRenew{ClusterId: "c2", Term: 3, Generation: 7, LeaseMs: 1000, Echo: nonce}, "cluster"},
		{"deposed leader", &pb.LeaseRenew{ClusterId: f.cluster, Term: 2, Generation: 9, LeaseMs: 1000, Echo: nonce}, "term 2"},
		{"assignment not applied", &pb.LeaseRenew{ClusterId: f.cluster, Term: 3, Generation: 8, LeaseMs: 1000, Echo: nonce}, "generation 8"},
		{"newer leader, no assignment yet", &pb.LeaseRenew{ClusterId: f.cluster, Term: 4, Generation: 7, LeaseMs: 1000, Echo: nonce}, "term 4"},
		{"no lease", &pb.LeaseRenew{ClusterId: f.cluster, Term: 3, Generation: 7, Echo: nonce}, "lease of 0 ms"},
		{"absurd lease", &pb.LeaseRenew{ClusterId: f.cluster, Term: 3, Generation: 7, LeaseMs: 1 << 40, Echo: nonce}, "outside"},
		{"unknown echo", &pb.LeaseRenew{ClusterId: f.cluster, Term: 3, Generation: 7, LeaseMs: 1000, Echo: nonce + 1}, "echoes none"},
	} {
		ack := f.renewOnce(c.m)
		if ack.Renewed || ack.ValidMs != 0 || !strings.Contains(ack.Refused, c.want) {
			t.Errorf("%s: %v, want refused with %q", c.name, ack, c.want)
		}
	}
	// An echo older than the lease (a renewal delayed in the network)
	// extends nothing.
	clock.advance(time.Second)
	if ack := f.renewAt(7, time.Second, nonce); ack.Renewed || !strings.Contains(ack.Refused, "longer than the lease") {
		t.Errorf("stale echo: %v", ack)
	}
}

// procState is the state letter of a process (/proc/PID/stat).
func procState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "", fmt.Errorf("stat %q", s)
	}
	return s[i+2 : i+3], nil
}

func TestPausedWorkerProcessIsStopped(t *testing.T) {
	if _, err := procState(os.Getpid()); err != nil {
		t.Skip("no /proc:", err)
	}
	clock := newFakeClock()
	f := newLeaseFixture(t, 1, nil, clock)
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 1, Runs: []*pb.RunJob{f.run("a", 1, 1, "serve")}})
	f.renewAt(1, 2*time.Second, f.renewAt(1, 2*time.Second, 0).Nonce)
	f.reports(1)
	pids := processesOf(t, f)
	clock.advance(2 * time.Second)
	f.check()
	for _, pid := range pids {
		poll.Until(t, 5*time.Second, fmt.Sprintf("process %d stopped", pid), func() bool { s, _ := procState(pid); return s == "T" })
	}
	f.renewAt(1, 2*time.Second, f.renewAt(1, 2*time.Second, 0).Nonce)
	for _, pid := range pids {
		poll.Until(t, 5*time.Second, fmt.Sprintf("process %d running again", pid), func() bool { s, _ := procState(pid); return s != "T" })
	}
	// Superseded while paused: killed, and the exit says so.
	clock.advance(2 * time.Second)
	f.check()
	f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 2})
	ex, ok := f.next(5 * time.Second).(*pb.WorkerExited)
	if !ok || ex.Signal != "killed" || !ex.Requested {
		t.Fatalf("exit %v, want killed on request", ex)
	}
}

// processesOf lists the pids of the workers the node's log says it
// started.
func processesOf(t *testing.T, f *fixture) []int {
	t.Helper()
	var pids []int
	for _, line := range strings.Split(f.log.String(), "\n") {
		if !strings.Contains(line, "worker started") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "pid="); ok {
				pid, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no worker started in the log: %s", f.log.String())
	}
	return pids
}

func TestHeldRunIsKeptIfRunningButNotStarted(t *testing.T) {
	l, clock := &fakeLauncher{}, newFakeClock()
	f := newLeaseFixture(t, 2, l, clock)
	held := func(inc uint64, hold bool) *pb.RunJob {
		r := f.run("a", inc, 1, "serve")
		r.Hold = hold
		return r
	}
	// Held and not running: not started, not even fenced.
	ack := f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 1, Runs: []*pb.RunJob{held(2, true)}})
	f.renewAt(1, time.Minute, f.renewAt(1, time.Minute, 0).Nonce)
	if !ack.Ok || len(ack.Runs) != 0 || len(l.started()) != 0 {
		t.Fatalf("held run: ack %v, %d workers", ack, len(l.started()))
	}
	// Released: started (it was never fenced, so not refused).
	if ack := f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 2, Runs: []*pb.RunJob{held(2, false)}}); !ack.Ok || len(ack.Runs) != 1 || ack.Runs[0].Refused != "" {
		t.Fatalf("released run: %v", ack)
	}
	poll.Until(t, 5*time.Second, "the worker", func() bool { return len(l.started()) == 1 })
	// Held again (a new leader with no ack yet): kept running.
	ack = f.sendOnce(&pb.Assign{ClusterId: f.cluster, Term: f.term + 1, Generation: 3, Runs: []*pb.RunJob{held(2, true)}})
	if !ack.Ok || len(ack.Runs) != 1 || ack.Runs[0].Alive != 1 || ack.Runs[0].Stopping {
		t.Fatalf("held running run: %v", ack)
	}
	if s := l.started()[0].signals(); len(s) != 0 {
		t.Fatalf("held running worker got %v", s)
	}
}
