package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"pollux/actors/agent"
	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/internal/secure"
	"pollux/testbed/emulator"
	"pollux/testbed/launch"
)

// TestPolluxProcess is not a test: agent tests re-execute the test binary
// with it selected to run `pollux ARGS...` (agents, and the workers they
// start).
func TestPolluxProcess(t *testing.T) {
	if os.Getenv("POLLUX_TEST_PROCESS") != "1" {
		t.Skip("helper process of the agent tests")
	}
	i := slices.Index(os.Args, "--")
	if i < 0 {
		t.Fatal("no -- in the arguments")
	}
	os.Exit(run(os.Args[i+1:]))
}

var selfExec = []string{os.Args[0], "-test.run=^TestPolluxProcess$", "--"}

// rootRunAs is --run-as root for an agent a test starts as root without
// a --run-as flag of its own: its workers run this test binary, which
// the uids of the default --run-as-range cannot reach (go test keeps it
// in a directory of mode 0700).
func rootRunAs(args []string) []string {
	if os.Geteuid() != 0 || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--run-as") }) {
		return nil
	}
	return []string{"--run-as", "root"}
}

// procTempDir is a TMPDIR for one pollux process, removed at cleanup:
// an agent the test kills leaves its pollux-agent-* directories (its
// workers' report tokens among them) there rather than in /tmp. Its
// workers' users (--run-as nobody) must pass through it to their
// token: 0711.
func procTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pollux-agent-test-")
	if err == nil {
		err = os.Chmod(dir, 0o711)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startAgent starts `pollux agent` as a subprocess and returns it with its
// ready line. The process is killed at cleanup if still running.
func startAgent(t *testing.T, name string, args ...string) (*exec.Cmd, agent.Ready) {
	t.Helper()
	return startAgentTo(t, os.Stderr, name, args...)
}

// startAgentTo is startAgent with the agent's log written to stderr.
func startAgentTo(t *testing.T, stderr io.Writer, name string, args ...string) (*exec.Cmd, agent.Ready) {
	t.Helper()
	full := append(slices.Clone(selfExec), "agent", "--name", name, "--fast-gossip", "--log-level", "warn",
		"--worker-exec", strings.Join(selfExec, ","), "--pass-env", "POLLUX_TEST_PROCESS")
	full = append(full, testBundle().Flags(name)...)
	cmd := exec.Command(full[0], append(append(full[1:], args...), rootRunAs(args)...)...)
	cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1", "TMPDIR="+procTempDir(t))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		var r agent.Ready
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("ready line %q: %v", line, err)
		}
		return cmd, r
	case <-time.After(30 * time.Second):
		t.Fatal("agent not ready within 30 s")
	}
	return nil, agent.Ready{}
}

// controller is the test's side of the cluster: a gossip member and an
// actor system with remote (the only remote node of this process).
type controller struct {
	t       *testing.T
	root    string // the checkpoint root its assignments name
	key     []byte // the report key its report tokens come from
	members *cluster.Membership
	sys     *actor.ActorSystem
	owner   *pb.Ref
	got     chan any
}

type ownerActor struct{ got chan any }

func (o *ownerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *pb.WorkerReports:
		for _, r := range m.Reports {
			o.got <- r
		}
	case *pb.WorkerExited:
		o.got <- m
	}
}

// testRemote is the one actor system with remote of this test process:
// protoactor's Remote.Start sets grpc's global logger, so a second remote
// node in one process races with the first one's connections.
// It holds the server certificate of testServer: agents take messages
// from servers only.
var testRemote = sync.OnceValue(func() *actor.ActorSystem {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	creds, err := testBundle().Credentials(testServer)
	if err != nil {
		panic(err)
	}
	opts, err := secure.RemoteOptions(creds, nil, log)
	if err != nil {
		panic(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, opts...)).Start()
	return sys
})

func newController(t *testing.T) *controller {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys, err := testBundle().GossipKeys()
	if err != nil {
		t.Fatal(err)
	}
	m, err := cluster.Start(cluster.Config{Name: testServer, Fast: true, Logger: log, Keys: keys, Meta: cluster.Meta{Role: cluster.RoleServer}})
	if err != nil {
		t.Fatal(err)
	}
	sys := testRemote()
	c := &controller{t: t, members: m, sys: sys, got: make(chan any, 1000), root: t.TempDir(), key: []byte("test report key")}
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &ownerActor{got: c.got} }))
	c.owner = &pb.Ref{Address: pid.Address, Id: pid.Id}
	t.Cleanup(func() {
		m.Shutdown()
		_ = sys.Root.StopFuture(pid).Wait()
	})
	return c
}

func (c *controller) waitMember(name string, kind cluster.EventKind) cluster.Member {
	c.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-c.members.Events():
			if ev.Kind == kind && ev.Member.Name == name {
				return ev.Member
			}
		case <-deadline:
			c.t.Fatalf("no %v event of %s", kind, name)
		}
	}
}

func (c *controller) assign(actorAddr string, a *pb.Assign) *pb.AssignAck {
	c.t.Helper()
	a.ClusterId, a.Term = "test-cluster", 1
	if a.CheckpointRoot == "" {
		a.CheckpointRoot = c.root
	}
	res, err := c.sys.Root.RequestFuture(actor.NewPID(actorAddr, pb.NodeActor), a, 10*time.Second).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	if ack := res.(*pb.AssignAck); ack.Ok {
		c.keepLease(actorAddr)
	}
	return res.(*pb.AssignAck)
}

func (c *controller) next() any {
	c.t.Helper()
	select {
	case m := <-c.got:
		return m
	case <-time.After(30 * time.Second):
		c.t.Fatal("no message from the node within 30 s")
		return nil
	}
}

// emulatedRun is incarnation 1 of an emulated job, checkpointing in
// c.root/job, with its report tokens.
func emulatedRun(c *controller, job string, replicas uint32) *pb.RunJob {
	return c.withTokens(&pb.RunJob{
		Job: job, Incarnation: 1, Application: "cifar10", Replicas: replicas, WorldSize: replicas, NumNodes: 1,
		MasterAddr: "127.0.0.1", MasterPort: 29500, InitBatch: 128, AtomicBatch: 128, Gain: 1,
		CheckpointDir: filepath.Join(c.root, job), Owner: c.owner,
	})
}

// withTokens gives rj the report tokens of its ranks.
func (c *controller) withTokens(rj *pb.RunJob) *pb.RunJob {
	rj.ReportTokens = nil
	for r := range rj.Replicas {
		rj.ReportTokens = append(rj.ReportTokens, workerproto.ReportToken(c.key, rj.Job, rj.Incarnation, int(rj.FirstRank+r)))
	}
	return rj
}

func TestAgentRunsEmulatedJobToCompletion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent and worker processes")
	}
	c := newController(t)
	agent, ready := startAgent(t, "a1", "--gpus", "2", "--rack", "r9", "--time-scale", "50000", "--restart-cost", "0s",
		"--grace", "2s", "--join", c.members.Addr())
	m := c.waitMember("a1", cluster.EventJoin)
	if m.Meta.GPUs != 2 || m.Meta.Rack != "r9" || m.Meta.ActorAddr != ready.Actor || m.Meta.Role != cluster.RoleAgent {
		t.Fatalf("agent member %+v, ready %+v", m, ready)
	}
	rj := emulatedRun(c, "cifar-1", 2)
	dir := rj.CheckpointDir
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 1, Runs: []*pb.RunJob{rj}}); !ack.Ok {
		t.Fatal(ack.Error)
	}
	var done bool
	var exits []uint32
	for !done || len(exits) < 2 {
		switch m := c.next().(type) {
		case *pb.WorkerReport:
			if m.Rank != 0 || m.Job != "cifar-1" || m.Node != "a1" {
				t.Errorf("report %v", m)
			}
			done = done || m.Done
		case *pb.WorkerExited:
			if m.ExitCode != 0 || m.Requested {
				t.Errorf("exit %v", m)
			}
			exits = append(exits, m.Rank)
		}
	}
	ck, err := emulator.Restore(dir, "cifar-1")
	if err != nil || !ck.Done || ck.Epoch != 100 {
		t.Errorf("checkpoint %+v, %v", ck, err)
	}
	// A stale generation is refused over the wire too.
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 0}); ack.Ok || ack.Generation != 1 {
		t.Errorf("stale ack %v", ack)
	}
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Errorf("agent exit: %v", err)
	}
	c.waitMember("a1", cluster.EventLeave)
}

func TestKilledAgentTakesItsWorkersAlong(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent and worker processes")
	}
	c := newController(t)
	agent, ready := startAgent(t, "a2", "--gpus", "2", "--time-scale", "1", "--restart-cost", "0s", "--join", c.members.Addr())
	c.waitMember("a2", cluster.EventJoin)
	job := "orphan-check-" + strconv.Itoa(os.Getpid())
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 1, Runs: []*pb.RunJob{emulatedRun(c, job, 2)}}); !ack.Ok {
		t.Fatal(ack.Error)
	}
	if _, ok := c.next().(*pb.WorkerReport); !ok {
		t.Fatal("no report from the workers")
	}
	if n := len(processesWithEnv("POLLUX_JOB_ID=" + job)); n != 2 {
		t.Fatalf("%d worker processes before the kill, want 2", n)
	}
	begin := time.Now()
	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	c.waitMember("a2", cluster.EventLeave)
	t.Logf("dead agent noticed after %v", time.Since(begin))
	deadline := time.Now().Add(5 * time.Second)
	for len(processesWithEnv("POLLUX_JOB_ID="+job)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("workers outlived their killed agent")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRestartedAgentGetsNoStaleAssignment: what a server sent to an
// agent while it was down is dropped, not delivered once the agent is
// back at the same address (protoactor's remote holds messages through
// its connection retries unless told not to). Delivered, the old
// assignment would be the first the restarted agent sees, newer than its
// fencing state on disk, and it would start a job the control plane has
// cancelled or moved since (pollux chaos saw exactly that).
func TestRestartedAgentGetsNoStaleAssignment(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	c := newController(t)
	ports, err := launch.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	args := []string{"--gpus", "2", "--time-scale", "1", "--restart-cost", "0s", "--data-dir", data,
		"--actor-port", strconv.Itoa(ports[0]), "--join", c.members.Addr()}
	agent, ready := startAgent(t, "a4", args...)
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 1}); !ack.Ok {
		t.Fatal(ack.Error)
	}
	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	// While the agent is down, the leader keeps assigning it a job (a
	// round every 200 ms); then the job is cancelled, and the agent
	// restarts.
	job := "stale-check-" + strconv.Itoa(os.Getpid())
	pid := actor.NewPID(ready.Actor, pb.NodeActor)
	for gen := uint64(2); gen < 7; gen++ {
		c.sys.Root.Send(pid, &pb.Assign{ClusterId: "test-cluster", Term: 1, Generation: gen,
			Runs: []*pb.RunJob{emulatedRun(c, job, 2)}, CheckpointRoot: c.root})
		time.Sleep(200 * time.Millisecond)
	}
	_, ready = startAgent(t, "a4", args...)
	// A lease for whatever assignment the agent holds now: had it been
	// given one sent while it was down, it would start its job.
	c.keepLease(ready.Actor)
	// protoactor retries a connection five times, two seconds apart:
	// anything it held would have arrived by now.
	deadline := time.Now().Add(11 * time.Second)
	for time.Now().Before(deadline) {
		if pids := processesWithEnv("POLLUX_JOB_ID=" + job); len(pids) > 0 {
			t.Fatalf("the restarted agent started workers %v of an assignment sent while it was down", pids)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ack := c.assign(ready.Actor, &pb.Assign{Generation: 8})
	if !ack.Ok || len(ack.Runs) != 0 {
		t.Errorf("the restarted agent's ack of a fresh assignment: %v", ack)
	}
}

// processesWithEnv lists the pids whose environment holds kv (Linux).
func processesWithEnv(kv string) []int { return workersIn("", kv) }

// workersIn lists the pids whose environment holds kv and, unless dir is
// empty, a value naming a path under dir (a launched cluster's workers
// have their checkpoint directory there): a scan for "POLLUX_JOB_ID=ds-1"
// does not count another run's workers of a job of that name.
func workersIn(dir, kv string) []int {
	paths, _ := filepath.Glob("/proc/[0-9]*/environ")
	var pids []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		env := bytes.Split(b, []byte{0})
		if slices.ContainsFunc(env, func(e []byte) bool { return string(e) == kv }) &&
			(dir == "" || slices.ContainsFunc(env, func(e []byte) bool { return bytes.Contains(e, []byte("="+dir+"/")) })) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, pid)
		}
	}
	return pids
}
