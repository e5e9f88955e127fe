package node

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/internal/logbuf"
)

// TestMain doubles as a fake worker: the node under test starts this test
// binary with "fakeworker MODE" as its arguments.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "fakeworker" {
		os.Exit(fakeWorker(os.Args[2]))
	}
	os.Exit(m.Run())
}

// fakeWorker follows the worker protocol minimally. Modes: "serve" reports
// once (rank 0 naming a checkpoint) then waits for SIGTERM and exits 0; "slowterm" takes 300 ms to exit
// after SIGTERM; "stubborn" ignores SIGTERM; "done" reports done and exits
// 0; "fail" exits 3; "say" writes a line to stdout and one to stderr
// and exits 0.
func fakeWorker(mode string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	env, err := workerproto.ParseEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 10
	}
	if mode == "fail" {
		return 3
	}
	if mode == "say" {
		fmt.Printf("out of rank %d\n", env.Rank)
		fmt.Fprintf(os.Stderr, "err of rank %d\n", env.Rank)
		return 0
	}
	c, err := net.Dial("tcp", env.ReportAddr)
	if err != nil {
		return 11
	}
	defer c.Close()
	rep := workerproto.Report{
		Job: env.JobID, Incarnation: env.Incarnation, Rank: env.Rank, Token: env.ReportToken,
		StepTime: 0.1, SyncTime: 0.01, LocalBatch: env.AtomicBatch, AccumSteps: env.AccumSteps, Done: mode == "done",
	}
	if mode == "env" {
		// The whole environment, for the test to see.
		if err := os.WriteFile(filepath.Join(env.CheckpointDir, "env"), []byte(strings.Join(os.Environ(), "\n")), 0o644); err != nil {
			return 15
		}
	}
	if mode == "cpuslot" {
		// A CPU slot: no GPU, its cores in POLLUX_CPUS and their count in
		// OMP_NUM_THREADS. Reported as epoch = first core, accum_steps =
		// number of cores, for the test to see.
		if len(env.GPUs) != 0 || len(env.CPUs) == 0 || os.Getenv(workerproto.EnvOMPThreads) != fmt.Sprint(len(env.CPUs)) {
			return 14
		}
		rep.Epoch, rep.AccumSteps = env.CPUs[0], len(env.CPUs)
	} else {
		rep.Epoch = env.GPUs[0] // the GPU, for the test to see
	}
	if mode == "serve" && env.Rank == 0 {
		// Rank 0 names a checkpoint it saved, for the test to see.
		rep.Checkpoint = workerproto.SavedCheckpoint{Epoch: rep.Epoch, Progress: 2.5, SavedAt: 1_796_000_000.5}
	}
	line, err := workerproto.Encode(rep)
	if err != nil {
		return 12
	}
	if _, err := c.Write(line); err != nil {
		return 13
	}
	if mode == "done" || mode == "env" {
		return 0
	}
	for {
		<-term
		switch mode {
		case "stubborn":
			continue
		case "slowterm":
			time.Sleep(300 * time.Millisecond)
		}
		return 0
	}
}

// owner collects what the node tells a run's owner.
type owner struct{ got chan any }

func (o *owner) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.WorkerReports:
		for _, r := range m.Reports {
			o.got <- r
		}
	case *pb.WorkerExited:
		o.got <- m
	}
}

type fixture struct {
	t       *testing.T
	sys     *actor.ActorSystem
	node    *Node
	owner   *pb.Ref
	got     chan any
	cluster string
	term    uint64
	dataDir string
	gpus    int
	slots   [][]int
	grace   time.Duration
	log     *logbuf.Buffer
	root    string   // the cluster's checkpoint root
	key     []byte   // the cluster's report key
	allow   []string // the node's allow-list (nil: the default)
	env     []string // Config.WorkerEnv
	nonce   uint64   // of the node's last lease ack
	launch  Launcher
	now     func() time.Time
}

// newFixture starts a node of gpus GPUs (CPU slots, if given).
func newFixture(t *testing.T, gpus int, grace time.Duration, cpuSlots ...[]int) *fixture {
	return newFixtureIn(t, gpus, grace, "", cpuSlots...)
}

// newFixtureIn starts a node whose fencing state lives in dataDir.
func newFixtureIn(t *testing.T, gpus int, grace time.Duration, dataDir string, cpuSlots ...[]int) *fixture {
	t.Helper()
	f := &fixture{t: t, dataDir: dataDir, gpus: gpus, slots: cpuSlots, grace: grace}
	f.init()
	return f
}

// init starts the fixture's actor system, node and owner (with a
// checkpoint root, a report key and an allow-list of the fake worker's
// modes unless set).
func (f *fixture) init() {
	f.t.Helper()
	if f.root == "" {
		f.root = f.t.TempDir()
	}
	if f.key == nil {
		f.key = []byte("test report key")
	}
	if f.allow == nil {
		f.allow = []string{"emulated:*"}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	f.got, f.cluster, f.term = make(chan any, 1000), "c1", 1
	f.startNode()
	pid := f.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &owner{got: f.got} }))
	f.owner = &pb.Ref{Address: pid.Address, Id: pid.Id}
	f.t.Cleanup(func() {
		if err := f.node.Stop(5 * time.Second); err != nil {
			f.t.Errorf("Stop: %v", err)
		}
		f.sys.Shutdown()
	})
}

func (f *fixture) startNode() { f.startNodeWith(nil) }

// startNodeWith starts the node, with edit's changes to its
// configuration.
func (f *fixture) startNodeWith(edit func(*Config)) {
	f.t.Helper()
	f.log = &logbuf.Buffer{}
	cfg := Config{Name: "n1", GPUs: f.gpus, CPUSlots: f.slots, Grace: f.grace, WorkerOutput: io.Discard, DataDir: f.dataDir,
		Logger: slog.New(slog.NewTextHandler(f.log, nil)), Launch: f.launch, Now: f.now, AllowCommands: f.allow, WorkerEnv: f.env,
		Emulator: func(app string) []string { return []string{os.Args[0], "fakeworker", app} }}
	if edit != nil {
		edit(&cfg)
	}
	n, err := Start(f.sys, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.node = n
}

// restart stops the node actor (and its workers) and starts a new one on
// the same data directory, as an agent restart does.
func (f *fixture) restart() {
	f.t.Helper()
	if err := f.node.Stop(5 * time.Second); err != nil {
		f.t.Fatal(err)
	}
	f.startNode()
}

// restartWith restarts the node with the fixture's settings and edit's
// changes.
func (f *fixture) restartWith(edit func(*Config)) {
	f.t.Helper()
	if err := f.node.Stop(5 * time.Second); err != nil {
		f.t.Fatal(err)
	}
	f.startNodeWith(edit)
}

// run is a RunJob of an emulated job whose "application" is the fake
// worker's mode, with its checkpoint directory under the root and the
// report tokens of its ranks.
func (f *fixture) run(job string, inc uint64, replicas uint32, mode string) *pb.RunJob {
	rj := &pb.RunJob{
		Job: job, Incarnation: inc, Application: mode, Replicas: replicas, WorldSize: replicas, NumNodes: 1,
		MasterAddr: "127.0.0.1", MasterPort: 29500, InitBatch: 32, AtomicBatch: 32, Gain: 1,
		CheckpointDir: filepath.Join(f.root, job), Owner: f.owner,
	}
	for r := range int(replicas) {
		rj.ReportTokens = append(rj.ReportTokens, f.token(job, inc, r))
	}
	return rj
}

func (f *fixture) token(job string, inc uint64, rank int) string {
	return workerproto.ReportToken(f.key, job, inc, rank)
}

func (f *fixture) assign(gen uint64, runs ...*pb.RunJob) *pb.AssignAck {
	f.t.Helper()
	return f.send(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: gen, Runs: runs})
}

// send sends an assignment as the leader does, followed by a renewal of
// the node's lease (for ten minutes) when it is accepted; if the
// assignment left runs pending for want of a lease, it is sent again,
// and the second answer, with the runs started, is returned.
func (f *fixture) send(a *pb.Assign) *pb.AssignAck {
	f.t.Helper()
	ack := f.sendOnce(a)
	if !ack.Ok {
		return ack
	}
	if renewed := f.renew(a.ClusterId, ack.Term, ack.Generation, 10*time.Minute); !renewed.Renewed {
		f.t.Fatalf("lease not renewed: %v", renewed)
	}
	for _, r := range ack.Runs {
		if r.Pending {
			return f.sendOnce(a)
		}
	}
	return ack
}

func (f *fixture) sendOnce(a *pb.Assign) *pb.AssignAck {
	f.t.Helper()
	if a.CheckpointRoot == "" {
		a.CheckpointRoot = f.root
	}
	res, err := f.sys.Root.RequestFuture(f.node.PID(), a, 5*time.Second).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return res.(*pb.AssignAck)
}

// renew renews the node's lease as the leader does: a renewal echoing
// the nonce of the node's last ack (asked for first if the fixture has
// none).
func (f *fixture) renew(cluster string, term, gen uint64, lease time.Duration) *pb.LeaseAck {
	f.t.Helper()
	var ack *pb.LeaseAck
	for range 2 {
		ack = f.renewOnce(&pb.LeaseRenew{ClusterId: cluster, Term: term, Generation: gen,
			LeaseMs: uint64(lease / time.Millisecond), Echo: f.nonce})
		f.nonce = ack.Nonce
		if ack.Renewed {
			break
		}
	}
	return ack
}

func (f *fixture) renewOnce(m *pb.LeaseRenew) *pb.LeaseAck {
	f.t.Helper()
	res, err := f.sys.Root.RequestFuture(f.node.PID(), m, 5*time.Second).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return res.(*pb.LeaseAck)
}

func (f *fixture) status() *pb.NodeStatus {
	f.t.Helper()
	res, err := f.sys.Root.RequestFuture(f.node.PID(), &pb.StatusRequest{}, 5*time.Second).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return res.(*pb.NodeStatus)
}

// next returns the next owner message, failing after d.
func (f *fixture) next(d time.Duration) any {
	f.t.Helper()
	select {
	case m := <-f.got:
		return m
	case <-time.After(d):
		f.t.Fatalf("no owner message within %v", d)
		return nil
	}
}

// reports waits for n reports (skipping nothing else) and returns them.
func (f *fixture) reports(n int) []*pb.WorkerReport {
	f.t.Helper()
	var out []*pb.WorkerReport
	for len(out) < n {
		switch m := f.next(5 * time.Second).(type) {
		case *pb.WorkerReport:
			out = append(out, m)
		default:
			f.t.Fatalf("got %T %v while waiting for reports", m, m)
		}
	}
	return out
}

func (f *fixture) quiet(d time.Duration) {
	f.t.Helper()
	select {
	case m := <-f.got:
		f.t.Fatalf("unexpected owner message %T %v", m, m)
	case <-time.After(d):
	}
}

func TestCPUSlotsPinWorkersToTheirCores(t *testing.T) {
	f := newFixture(t, 2, time.Second, []int{0, 1}, []int{2})
	if ack := f.assign(1, f.run("c", 1, 2, "cpuslot")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	got := map[[2]int]bool{}
	for _, r := range f.reports(2) {
		got[[2]int{int(r.Epoch), int(r.AccumSteps)}] = true
	}
	if !got[[2]int{0, 2}] || !got[[2]int{2, 1}] {
		t.Errorf("workers saw (first core, cores) %v, want (0, 2) and (2, 1)", got)
	}
}

func TestCPUSlotsMustMatchTheGPUs(t *testing.T) {
	sys := actor.NewActorSystem()
	for _, slots := range [][][]int{{{0}}, {{0}, {}}, {{0}, {-1}}} {
		if _, err := Start(sys, Config{Name: "n", GPUs: 2, CPUSlots: slots}); !errors.Is(err, ErrConfig) {
			t.Errorf("CPU slots %v for 2 GPUs: %v, want ErrConfig", slots, err)
		}
	}
}

func TestStartsWorkersOnDistinctGPUsIdempotently(t *testing.T) {
	f := newFixture(t, 4, time.Second)
	rj := f.run("a", 1, 3, "serve")
	if ack := f.assign(1, rj); !ack.Ok {
		t.Fatal(ack.Error)
	}
	var gpus, ranks []int
	for _, r := range f.reports(3) {
		gpus = append(gpus, int(r.Epoch))
		ranks = append(ranks, int(r.Rank))
		if r.Job != "a" || r.Incarnation != 1 || r.Node != "n1" || r.LocalBsz != 32 {
			t.Errorf("report %v", r)
		}
		// The checkpoint rank 0 names is forwarded with its report.
		if ck := r.Rank == 0; ck != (r.CheckpointAt == 1_796_000_000.5) || (ck && (r.CheckpointEpoch != r.Epoch || r.CheckpointProgress != 2.5)) {
			t.Errorf("rank %d report's checkpoint: epoch %d, progress %v, at %v", r.Rank, r.CheckpointEpoch, r.CheckpointProgress, r.CheckpointAt)
		}
	}
	slices.Sort(gpus)
	slices.Sort(ranks)
	if !slices.Equal(ranks, []int{0, 1, 2}) || len(slices.Compact(gpus)) != 3 {
		t.Errorf("ranks %v on GPUs %v", ranks, gpus)
	}
	// Re-sent (same and newer generation): nothing new starts.
	f.assign(1, rj)
	f.assign(2, rj)
	f.quiet(300 * time.Millisecond)
	st := f.status()
	if len(st.Jobs) != 1 || st.Jobs[0].Alive != 3 || st.Generation != 2 {
		t.Errorf("status %v", st)
	}
}

func TestRefusesStaleAndBadAssignments(t *testing.T) {
	f := newFixture(t, 4, time.Second)
	if ack := f.assign(5); !ack.Ok || ack.Generation != 5 {
		t.Fatalf("ack %v", ack)
	}
	tests := []struct {
		name    string
		gen     uint64
		runs    []*pb.RunJob
		mention string
	}{
		{"stale generation", 4, []*pb.RunJob{f.run("a", 1, 1, "serve")}, "stale generation 4"},
		{"over capacity", 6, []*pb.RunJob{f.run("a", 1, 3, "serve"), f.run("b", 1, 2, "serve")}, "5 workers assigned to 4 GPUs"},
		{"bad name", 6, []*pb.RunJob{f.run("A B", 1, 1, "serve")}, "name"},
		{"twice", 6, []*pb.RunJob{f.run("a", 1, 1, "serve"), f.run("a", 2, 1, "serve")}, "twice"},
		{"no program", 6, []*pb.RunJob{{Job: "a", Incarnation: 1, Replicas: 1, WorldSize: 1}}, "exactly one of"},
		{"ranks beyond world", 6, []*pb.RunJob{func() *pb.RunJob { r := f.run("a", 1, 2, "serve"); r.FirstRank = 1; return r }()}, "beyond world size"},
		{"no report env", 6, []*pb.RunJob{func() *pb.RunJob { r := f.run("a", 1, 1, "serve"); r.CheckpointDir = ""; return r }()}, "CHECKPOINT"},
	}
	for _, tc := range tests {
		ack := f.assign(tc.gen, tc.runs...)
		if ack.Ok || !strings.Contains(ack.Error, tc.mention) || ack.Generation != 5 {
			t.Errorf("%s: ack %v, want refusal mentioning %q at generation 5", tc.name, ack, tc.mention)
		}
	}
	f.quiet(200 * time.Millisecond)
	if st := f.status(); len(st.Jobs) != 0 || st.Generation != 5 {
		t.Errorf("status after refusals: %v", st)
	}
}

// TestRefusesAssignmentPlacedForOtherAttributes: an agent restarted as a
// t4 machine in rack r1 refuses runs placed for the machine it was (an
// a100, or in rack r0) before the leader saw its new registration, and
// runs the same incarnation once placed for what it is.
func TestRefusesAssignmentPlacedForOtherAttributes(t *testing.T) {
	f := newFixture(t, 4, time.Second)
	f.restartWith(func(c *Config) { c.GPUType, c.Topology = "t4", "rack=r1" })
	rack := []string{"rack"}
	tests := []struct {
		name    string
		node    *pb.NodeAttrs
		mention string
	}{
		{"other GPU type", &pb.NodeAttrs{GpuType: "a100", Levels: rack, Domains: []string{"r1"}}, `placed for GPU type "a100", node has "t4"`},
		{"untyped", &pb.NodeAttrs{Levels: rack, Domains: []string{"r1"}}, `placed for GPU type "", node has "t4"`},
		{"other rack", &pb.NodeAttrs{GpuType: "t4", Levels: rack, Domains: []string{"r0"}}, `placed for topology "rack=r0", node is in "rack=r1"`},
		{"default rack", &pb.NodeAttrs{GpuType: "t4", Levels: rack}, `placed for topology "", node is in "rack=r1"`},
		{"more levels", &pb.NodeAttrs{GpuType: "t4", Levels: []string{"rack", "zone"}, Domains: []string{"r1", "z1"}}, `level "zone" missing`},
	}
	for i, tc := range tests {
		ack := f.send(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: uint64(i + 1), Node: tc.node,
			Runs: []*pb.RunJob{f.run("a", 1, 2, "serve")}})
		if ack.Ok || !strings.Contains(ack.Error, tc.mention) || len(ack.Runs) != 0 {
			t.Errorf("%s: ack %v, want a refusal mentioning %q and nothing run", tc.name, ack, tc.mention)
		}
	}
	ack := f.send(&pb.Assign{ClusterId: f.cluster, Term: f.term, Generation: 10,
		Node: &pb.NodeAttrs{GpuType: "t4", Levels: rack, Domains: []string{"r1"}}, Runs: []*pb.RunJob{f.run("a", 1, 2, "serve")}})
	if !ack.Ok {
		t.Fatalf("placed for what the node is: %v", ack)
	}
	if got := len(f.reports(2)); got != 2 {
		t.Errorf("%d workers reported, want 2", got)
	}
}

func TestNewJobWaitsForOldWorkersToExit(t *testing.T) {
	f := newFixture(t, 2, 5*time.Second)
	f.assign(1, f.run("a", 1, 2, "slowterm"))
	f.reports(2)
	// Generation 2 replaces a with b on the same GPUs: b must not start
	// before both of a's workers have exited (they take 300 ms).
	if ack := f.assign(2, f.run("b", 1, 2, "serve")); !ack.Ok {
		t.Fatal(ack.Error)
	}
	st := f.status()
	if len(st.Jobs) != 2 || !st.Jobs[0].Stopping || !st.Jobs[1].Pending {
		t.Errorf("status while a drains: %v", st)
	}
	var exits int
	for exits < 2 {
		switch m := f.next(5 * time.Second).(type) {
		case *pb.WorkerExited:
			if m.Job != "a" || !m.Requested || m.ExitCode != 0 {
				t.Errorf("exit %v", m)
			}
			exits++
		default:
			t.Fatalf("%T %v before a's workers exited", m, m)
		}
	}
	for _, r := range f.reports(2) {
		if r.Job != "b" {
			t.Errorf("report %v", r)
		}
	}
}

func TestStubbornWorkerIsKilledAfterGrace(t *testing.T) {
	f := newFixture(t, 1, 200*time.Millisecond)
	f.assign(1, f.run("a", 1, 1, "stubborn"))
	f.reports(1)
	begin := time.Now()
	f.assign(2)
	m, ok := f.next(5 * time.Second).(*pb.WorkerExited)
	if !ok || m.Signal != "killed" || !m.Requested || m.ExitCode != -1 {
		t.Fatalf("exit %v", m)
	}
	if d := time.Since(begin); d < 200*time.Millisecond {
		t.Errorf("killed after %v, before the grace period", d)
	}
}

func TestFinishedRunIsNeverRestarted(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	rj := f.run("a", 1, 1, "done")
	f.assign(1, rj)
	if r := f.reports(1)[0]; !r.Done {
		t.Errorf("report %v", r)
	}
	if m, ok := f.next(5 * time.Second).(*pb.WorkerExited); !ok || m.Requested || m.ExitCode != 0 {
		t.Fatalf("exit %v", m)
	}
	// Still assigned: the ack tells how it ended (done, its exit), for a
	// leader that missed the messages; nothing restarts.
	ack := f.assign(2, rj)
	if len(ack.Runs) != 1 || !ack.Runs[0].Done || ack.Runs[0].Alive != 0 || len(ack.Runs[0].Exits) != 1 ||
		ack.Runs[0].Exits[0].ExitCode != 0 || ack.Runs[0].Exits[0].Requested {
		t.Errorf("ack of the finished run %v", ack)
	}
	f.assign(3) // dropped from the assignment ...
	f.assign(4, rj)
	f.quiet(300 * time.Millisecond) // ... and re-sent: still not restarted
	// An older incarnation is not started either; a newer one is.
	f.assign(5, f.run("a", 0, 1, "serve"))
	f.quiet(200 * time.Millisecond)
	f.assign(6, f.run("a", 2, 1, "serve"))
	if r := f.reports(1)[0]; r.Incarnation != 2 {
		t.Errorf("report %v", r)
	}
}

func TestFailedWorkerIsReported(t *testing.T) {
	f := newFixture(t, 1, time.Second)
	f.assign(1, f.run("a", 1, 1, "fail"))
	if m, ok := f.next(5 * time.Second).(*pb.WorkerExited); !ok || m.ExitCode != 3 || m.Requested {
		t.Fatalf("exit %v", m)
	}
}

func TestStopTerminatesWorkers(t *testing.T) {
	f := newFixture(t, 2, time.Second)
	f.assign(1, f.run("a", 1, 2, "serve"))
	f.reports(2)
	if err := f.node.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if m, ok := f.next(5 * time.Second).(*pb.WorkerExited); !ok || !m.Requested {
			t.Fatalf("exit %v", m)
		}
	}
}
