package control

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/raft"

	"pollux/actors/node"
	"pollux/actors/workerproto"
	"pollux/cluster"
	"pollux/consensus"
	"pollux/optimizer/goodput"
	"pollux/testbed/builtin"
	"pollux/testbed/emulator"
)

// TestMain doubles as an emulated worker: the node actor under test
// starts this binary with "emuworker APP".
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "emuworker" {
		os.Exit(emuWorker(os.Args[2]))
	}
	os.Exit(m.Run())
}

func emuWorker(app string) int {
	if app == "crash" {
		return 3
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	env, err := workerproto.ParseEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cat, err := builtin.Catalog()
	if err != nil || cat[app] == nil {
		return 3
	}
	_, err = emulator.Run(ctx, emulator.Config{Env: env, App: cat[app], TimeScale: 3000,
		ReportEvery: 50 * time.Millisecond, Tick: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 4
	}
	return 0
}

func quiet() *slog.Logger {
	if os.Getenv("CONTROL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// singleServer is a one-member in-memory consensus cluster.
func singleServer(t *testing.T) *consensus.Server {
	t.Helper()
	cfg := consensus.DefaultConfig("s0")
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.Logger = quiet()
	addr, trans := raft.NewInmemTransport("s0")
	store := raft.NewInmemStore()
	srv, err := consensus.NewServer(cfg, consensus.Stores{Transport: trans, Logs: store, Stable: store, Snapshots: raft.NewInmemSnapshotStore()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	if err := srv.Bootstrap([]raft.Server{{ID: "s0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, leader := srv.Leadership(); leader {
			return srv
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordingStore remembers the profile entries the job actors write.
type recordingStore struct {
	*consensus.Server
	mu       sync.Mutex
	profiles []consensus.RecordProfile
}

func (r *recordingStore) RecordProfile(ctx context.Context, p consensus.RecordProfile) error {
	r.mu.Lock()
	r.profiles = append(r.profiles, p)
	r.mu.Unlock()
	return r.Server.RecordProfile(ctx, p)
}

func TestClusterRunsJobsToCompletion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs emulated worker processes")
	}
	srv := singleServer(t)
	store := &recordingStore{Server: srv}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	nd, err := node.Start(sys, node.Config{Name: "n1", GPUs: 4, Grace: 5 * time.Second, WorkerOutput: io.Discard, Logger: quiet(),
		Emulator: func(app string) []string { return []string{os.Args[0], "emuworker", app} }})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Stop(10 * time.Second)
	ctx := context.Background()
	if err := srv.RegisterNode(ctx, consensus.Node{ID: "n1", Addresses: []string{sys.Address()}, GPUs: 4, Health: consensus.Alive}); err != nil {
		t.Fatal(err)
	}
	cat, _ := builtin.Catalog()
	jobs := map[string]string{"c1": "cifar10", "c2": "cifar10", "d1": "deepspeech2"}
	for id, app := range jobs {
		spec := consensus.JobSpec{Name: id, App: app, MinReplicas: 1, MaxReplicas: 4, Limits: cat[app].Limits(), CheckpointDir: t.TempDir()}
		if err := srv.SubmitJob(ctx, id, spec, float64(time.Now().UnixNano())/1e9); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var rounds []RoundInfo
	props, err := NewAllocator(Config{Store: store, Interval: 200 * time.Millisecond, TimeScale: 3000, CheckpointRoot: t.TempDir(), Logger: quiet()},
		func(ri RoundInfo) { mu.Lock(); rounds = append(rounds, ri); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	pid, err := sys.Root.SpawnNamed(props, AllocatorName)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		st := srv.LocalState()
		done := 0
		for _, j := range st.Jobs {
			if j.State == consensus.Completed {
				done++
			}
			if j.State == consensus.Failed {
				t.Fatalf("job %s failed: %s", j.ID, j.Reason)
			}
		}
		if done == len(jobs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs completed", done, len(jobs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, ri := range rounds {
		if ri.GPUsUsed > 4 {
			t.Errorf("round %+v uses more than 4 GPUs", ri)
		}
	}
	adapted := false
	for _, p := range store.profiles {
		for _, e := range p.Entries {
			if e.LocalBatch*e.Replicas != cat[jobs[p.ID]].Limits().InitBatch {
				adapted = true
			}
		}
	}
	if !adapted {
		t.Error("no job ever ran at a batch other than its initial one")
	}
	st := srv.LocalState()
	for id, j := range st.Jobs {
		if j.Epoch != cat[jobs[id]].MaxEpochs() || len(j.Profile) == 0 || j.Attained <= 0 {
			t.Errorf("job %s: epoch %d, %d profile entries, attained %v", id, j.Epoch, len(j.Profile), j.Attained)
		}
	}
	t.Logf("%d rounds, last %+v", len(rounds), rounds[len(rounds)-1])
}

// startAllocator spawns an allocator over srv and a one-node actor system
// whose node runs emulated workers; members may be nil.
func startAllocator(t *testing.T, srv *consensus.Server, members Members, nodeGrace time.Duration, opts ...func(*Config)) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	nd, err := node.Start(sys, node.Config{Name: "n1", GPUs: 2, Grace: 5 * time.Second, WorkerOutput: io.Discard, Logger: quiet(),
		Emulator: func(app string) []string { return []string{os.Args[0], "emuworker", app} }})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: srv, Members: members, Interval: 100 * time.Millisecond, TimeScale: 1000, NodeGrace: nodeGrace,
		CheckpointRoot: t.TempDir(), Logger: quiet()}
	for _, o := range opts {
		o(&cfg)
	}
	props, err := NewAllocator(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := sys.Root.SpawnNamed(props, AllocatorName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sys.Root.StopFuture(pid).Wait()
		_ = nd.Stop(10 * time.Second)
	})
	return sys
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFailedWorkersAreRestartedUnderNewIncarnations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	srv := singleServer(t)
	ctx := context.Background()
	startAllocator(t, srv, nil, 0)
	if err := srv.RegisterNode(ctx, consensus.Node{ID: "n1", Addresses: []string{"nonhost"}, GPUs: 2, Health: consensus.Alive}); err != nil {
		t.Fatal(err)
	}
	spec := consensus.JobSpec{Name: "x", App: "crash", MinReplicas: 1, MaxReplicas: 1,
		Limits: goodput.Limits{InitBatch: 32, MaxBatch: 32, MinLocal: 32, MaxLocal: 32}, CheckpointDir: t.TempDir()}
	if err := srv.SubmitJob(ctx, "x", spec, float64(time.Now().Unix())); err != nil {
		t.Fatal(err)
	}
	// Every failure takes the job off its GPUs for a round, and the next
	// round places it again under a new incarnation.
	waitFor(t, "three failed incarnations", func() bool {
		j := srv.LocalState().Jobs["x"]
		return j != nil && j.Incarnation >= 4
	})
	if j := srv.LocalState().Jobs["x"]; j.State.Terminal() {
		t.Errorf("job state %v", j.State)
	}
}

func TestCrashLoopingJobFails(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes")
	}
	srv := singleServer(t)
	ctx := context.Background()
	startAllocator(t, srv, nil, 0, func(c *Config) { c.MaxFailures = 3 })
	if err := srv.RegisterNode(ctx, consensus.Node{ID: "n1", Addresses: []string{"nonhost"}, GPUs: 2, Health: consensus.Alive}); err != nil {
		t.Fatal(err)
	}
	spec := consensus.JobSpec{Name: "x", App: "crash", MinReplicas: 1, MaxReplicas: 1,
		Limits: goodput.Limits{InitBatch: 32, MaxBatch: 32, MinLocal: 32, MaxLocal: 32}, CheckpointDir: t.TempDir()}
	if err := srv.SubmitJob(ctx, "x", spec, float64(time.Now().Unix())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crash-looping job to be failed", func() bool {
		j := srv.LocalState().Jobs["x"]
		return j != nil && j.State.Terminal()
	})
	st := srv.LocalState()
	j := st.Jobs["x"]
	if j.State != consensus.Failed || !strings.Contains(j.Reason, "3 incarnations") {
		t.Errorf("job state %v, reason %q", j.State, j.Reason)
	}
	waitFor(t, "its GPUs to be released", func() bool { return len(srv.LocalState().Allocation.Jobs["x"]) == 0 })
}

func TestMembersAreRegisteredAndMarkedDead(t *testing.T) {
	srv := singleServer(t)
	var mu sync.Mutex
	members := []cluster.Member{
		{Name: "s0", Meta: cluster.Meta{Role: cluster.RoleServer}},
		{Name: "n1", Meta: cluster.Meta{Role: cluster.RoleAgent, GPUs: 2, Rack: "r1", ActorAddr: "127.0.0.1:9"}},
		{Name: "n2", Meta: cluster.Meta{Role: cluster.RoleAgent, GPUs: 4, ActorAddr: "127.0.0.1:10"}},
	}
	startAllocator(t, srv, func() []cluster.Member { mu.Lock(); defer mu.Unlock(); return slices.Clone(members) }, 500*time.Millisecond)
	waitFor(t, "both agents registered", func() bool {
		st := srv.LocalState()
		return len(st.Nodes) == 2 && st.Nodes["n1"].Rack == "r1" && st.Nodes["n2"].GPUs == 4
	})
	// A blip shorter than the grace period changes nothing.
	mu.Lock()
	all := slices.Clone(members)
	members = members[:2]
	mu.Unlock()
	time.Sleep(250 * time.Millisecond)
	mu.Lock()
	members = all
	mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	if h := srv.LocalState().Nodes["n2"].Health; h != consensus.Alive {
		t.Fatalf("n2 is %v after a short absence", h)
	}
	mu.Lock()
	members = members[:2] // n2 is gone
	mu.Unlock()
	gone := time.Now()
	waitFor(t, "n2 marked dead", func() bool {
		st := srv.LocalState()
		return st.Nodes["n2"].Health == consensus.Dead && st.Nodes["n1"].Health == consensus.Alive
	})
	if d := time.Since(gone); d < 500*time.Millisecond {
		t.Errorf("n2 marked dead after %v, before the grace period", d)
	}
}
