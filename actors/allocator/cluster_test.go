package allocator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/raft"

	"pollux/actors/allocator"
	"pollux/actors/job"
	"pollux/actors/node"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/fabric"
	"pollux/testbed/inproc"
)

func quiet() *slog.Logger {
	if os.Getenv("CONTROL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// tcluster is a whole control plane in one process: servers (Raft in
// memory), each with its allocator and job host, and nodes running
// in-process emulated workers, all in one actor system (no remote:
// protoactor's remote races with a second one in one process). It
// records what every job actor bid and what every worker was told, and
// can drop messages.
type tcluster struct {
	t      *testing.T
	sys    *actor.ActorSystem
	cat    testbed.Catalog
	fwd    *consensus.LocalForwarder
	root   string
	opts   clusterOpts
	stats  *allocator.Stats
	mu     sync.Mutex
	server []*tserver
	agents []cluster.Member
	nodes  []*node.Node
	bids   map[string][]*pb.Bid     // job -> every bid its actors sent
	told   []node.WorkerSpec        // every worker started
	rounds []allocator.RoundInfo    // rounds of every leader
	drops  map[string]*dropRule     // message kind -> rule
	seen   map[string]int           // message kind -> how many passed the drop points
	delays map[string]time.Duration // message kind -> how long each is held on its way
	// assigns counts the Assigns sent, per generation.
	assigns map[uint64]int
	runs    map[string][]*pb.RunJob // job -> every run assigned to a node
	net     netState                // partitions and workers' signals (lease_test.go)
}

type tserver struct {
	id          string
	srv         *consensus.Server
	alloc, host *actor.PID
	down        bool
}

type clusterOpts struct {
	servers, nodes, gpus int
	interval             time.Duration
	timeScale            float64
	maxFailures          int
	nodeGrace, lease     time.Duration
	// keyless: the cluster is configured (its root) without a report key
	// before the allocators start, as one made before report tokens, and
	// the allocators run without a checkpoint root of their own.
	keyless bool
	// autoscale, if set, gives every allocator these autoscaling
	// settings (scale_test.go).
	autoscale func(c *tcluster) *allocator.Autoscale
	// gpuTypes are the nodes' GPU types by name (none: untyped), and
	// slower how many times longer every step takes on a type than the
	// catalog says (types_cluster_test.go).
	gpuTypes map[string]string
	slower   map[string]float64
	// racks are the nodes' racks by name (none: one rack), and links
	// the network of racks their emulated workers share
	// (racks_cluster_test.go).
	racks map[string]int
	links *fabric.Links
	// store, if set, is what each allocator writes through (default:
	// its server).
	store func(*consensus.Server) allocator.Store
	// policy, if set, makes each allocator's policy (default: the
	// allocator's).
	policy func() optimizer.Policy
}

// dropRule drops the first n messages matching match.
type dropRule struct {
	match   func(any) bool
	n       int
	dropped int
}

func newTCluster(t *testing.T, o clusterOpts) *tcluster {
	t.Helper()
	if o.interval == 0 {
		o.interval = 200 * time.Millisecond
	}
	if o.timeScale == 0 {
		o.timeScale = 3000
	}
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	c := &tcluster{t: t, cat: cat, fwd: consensus.NewLocalForwarder(), root: t.TempDir(), opts: o, stats: &allocator.Stats{},
		bids: map[string][]*pb.Bid{}, drops: map[string]*dropRule{}, seen: map[string]int{}, runs: map[string][]*pb.RunJob{},
		delays: map[string]time.Duration{}, assigns: map[uint64]int{}}
	c.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	var peers []raft.Server
	trans := map[raft.ServerAddress]*raft.InmemTransport{}
	for i := range o.servers {
		id := fmt.Sprintf("s%d", i)
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		trans[addr] = tr
		peers = append(peers, raft.Server{ID: raft.ServerID(id), Address: addr})
	}
	for a, ta := range trans {
		for b, tb := range trans {
			if a != b {
				ta.Connect(b, tb)
			}
		}
	}
	for i, p := range peers {
		cfg := consensus.DefaultConfig(p.ID)
		cfg.Logger = quiet()
		store := raft.NewInmemStore()
		srv, err := consensus.NewServer(cfg, consensus.Stores{Transport: trans[p.Address], Logs: store, Stable: store,
			Snapshots: raft.NewInmemSnapshotStore(), Forwarder: c.fwd})
		if err != nil {
			t.Fatal(err)
		}
		c.fwd.Add(srv)
		if i == 0 {
			if err := srv.Bootstrap(peers); err != nil {
				t.Fatal(err)
			}
		}
		c.server = append(c.server, &tserver{id: string(p.ID), srv: srv})
	}
	for i := range o.nodes {
		c.addNode(fmt.Sprintf("n%d", i))
	}
	if o.keyless {
		if err := c.leader().srv.InitCluster(ctxT(t), state.InitCluster{ID: "old", CheckpointRoot: c.root}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range c.server {
		c.startActors(s)
	}
	t.Cleanup(c.stop)
	return c
}

// addNode starts an in-process node (an agent) named name and makes it a
// member.
func (c *tcluster) addNode(name string) {
	c.t.Helper()
	if _, err := c.startNode(name); err != nil {
		c.t.Fatal(err)
	}
}

// startNode is addNode for any goroutine.
func (c *tcluster) startNode(name string) (*node.Node, error) {
	o := c.opts
	cat := c.cat
	typ := o.gpuTypes[name]
	if f, ok := o.slower[typ]; ok {
		cat = slowCatalog(cat, f)
	}
	l := &inproc.Launcher{Catalog: cat, TimeScale: o.timeScale, Tick: 10 * time.Millisecond, ReportEvery: 50 * time.Millisecond,
		Started: func(s node.WorkerSpec) { c.mu.Lock(); c.told = append(c.told, s); c.mu.Unlock() }}
	meta := cluster.Meta{Role: cluster.RoleAgent, GPUs: o.gpus, GPUType: typ, ActorAddr: c.sys.Address()}
	if r, ok := o.racks[name]; ok {
		meta.Rack = fmt.Sprintf("r%d", r)
		meta.Topology = "rack=" + meta.Rack
		l.Links, l.Rack = o.links, r
	}
	nd, err := node.Start(c.sys, node.Config{Name: name, GPUs: o.gpus, GPUType: typ, Topology: meta.Topology, Grace: 5 * time.Second, ReportListen: "none",
		ActorName: "node-" + name, Launch: c.watchLaunch(name, l.Launch), Logger: quiet(), WorkerOutput: io.Discard,
		Emulator: func(app string) []string { return []string{"inproc", app} },
		PropsOptions: []actor.PropsOption{
			actor.WithReceiverMiddleware(c.receiveDrops, c.cutIn(name)),
			actor.WithSenderMiddleware(c.sendDrops, c.cutOut(name)),
		}})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, nd)
	c.agents = append(c.agents, cluster.Member{Name: name, Meta: meta})
	return nd, nil
}

func (c *tcluster) policy() optimizer.Policy {
	if c.opts.policy == nil {
		return nil
	}
	return c.opts.policy()
}

func (c *tcluster) autoscale() *allocator.Autoscale {
	if c.opts.autoscale == nil {
		return nil
	}
	return c.opts.autoscale(c)
}

func (c *tcluster) startActors(s *tserver) {
	c.t.Helper()
	hprops, err := job.NewHost(job.HostConfig{Server: s.id, Store: s.srv, BidEvery: 100 * time.Millisecond, RefitEvery: time.Second,
		Logger: quiet(), JobPropsOptions: []actor.PropsOption{actor.WithSenderMiddleware(c.sendDrops)}})
	if err != nil {
		c.t.Fatal(err)
	}
	if s.host, err = c.sys.Root.SpawnNamed(hprops, "jobhost-"+s.id); err != nil {
		c.t.Fatal(err)
	}
	root := c.root
	if c.opts.keyless {
		root = ""
	}
	var store allocator.Store = s.srv
	if c.opts.store != nil {
		store = c.opts.store(s.srv)
	}
	props, err := allocator.NewAllocator(allocator.Config{Store: store, Server: s.id, Members: c.members, Interval: c.opts.interval,
		TimeScale: c.opts.timeScale, CheckpointRoot: root, MaxFailures: c.opts.maxFailures, AckTimeout: time.Second,
		NodeGrace: c.opts.nodeGrace, Lease: c.opts.lease,
		NodePID: func(n *state.Node) *actor.PID { return actor.NewPID(n.Addresses[0], "node-"+n.ID) },
		HostPID: func(m cluster.Member) *actor.PID { return actor.NewPID(m.Meta.ActorAddr, "jobhost-"+m.Name) },
		Stats:   c.stats, Logger: quiet(), Autoscale: c.autoscale(), Policy: c.policy()}, func(ri allocator.RoundInfo) { c.mu.Lock(); c.rounds = append(c.rounds, ri); c.mu.Unlock() })
	if err != nil {
		c.t.Fatal(err)
	}
	if s.alloc, err = c.sys.Root.SpawnNamed(props, "allocator-"+s.id); err != nil {
		c.t.Fatal(err)
	}
}

// members is what gossip would say: the servers not killed, the agents.
func (c *tcluster) members() []cluster.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.DeleteFunc(slices.Clone(c.agents), func(m cluster.Member) bool { return c.net.gone[m.Name] })
	for _, s := range c.server {
		if !s.down {
			out = append(out, cluster.Member{Name: s.id, Meta: cluster.Meta{Role: cluster.RoleServer, ActorAddr: c.sys.Address()}})
		}
	}
	return out
}

func (c *tcluster) stop() {
	for _, s := range c.server {
		if !s.down {
			c.kill(s)
		}
	}
	for _, n := range c.nodes {
		_ = n.Stop(10 * time.Second)
	}
	c.sys.Shutdown()
}

// kill stops a server's actors and Raft at once, as a crash would.
func (c *tcluster) kill(s *tserver) {
	c.mu.Lock()
	s.down = true
	c.mu.Unlock()
	_ = c.sys.Root.StopFuture(s.alloc).Wait()
	_ = c.sys.Root.StopFuture(s.host).Wait()
	c.fwd.SetReachable(raft.ServerID(s.id), false)
	_ = s.srv.Shutdown()
}

// leader is the live server that leads, waiting for one.
func (c *tcluster) leader() *tserver {
	c.t.Helper()
	var out *tserver
	poll.Until(c.t, 10*time.Second, "a leader", func() bool {
		for _, s := range c.server {
			if _, l := s.srv.Leadership(); l && !s.down {
				out = s
				return true
			}
		}
		return false
	})
	return out
}

// any is a live server.
func (c *tcluster) any() *tserver {
	for _, s := range c.server {
		if !s.down {
			return s
		}
	}
	c.t.Fatal("no live server")
	return nil
}

func (c *tcluster) submit(id, app string, maxReplicas int) {
	c.t.Helper()
	base := app
	if a, ok := inprocApp(app); ok {
		base = a
	}
	c.submitSpec(id, state.JobSpec{Name: id, App: app, MinReplicas: 1, MaxReplicas: maxReplicas, Limits: c.cat[base].Limits()})
}

func (c *tcluster) submitSpec(id string, spec state.JobSpec) {
	c.t.Helper()
	ctx := ctxT(c.t)
	// Submissions without a checkpoint directory need the cluster's
	// root: wait for the first leader to configure it.
	poll.Until(c.t, 10*time.Second, "the cluster configuration", func() bool { return c.any().srv.LocalState().Config.ID != "" })
	if err := c.any().srv.SubmitJob(ctx, id, spec, float64(time.Now().UnixNano())/1e9); err != nil {
		c.t.Fatal(err)
	}
}

// nodeStatus asks node i what it runs.
func (c *tcluster) nodeStatus(i int) *pb.NodeStatus {
	c.t.Helper()
	res, err := c.sys.Root.RequestFuture(c.nodes[i].PID(), &pb.StatusRequest{}, 5*time.Second).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return res.(*pb.NodeStatus)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inprocApp is the catalog application behind an inproc test app name.
func inprocApp(app string) (string, bool) {
	if len(app) > len(inproc.CrashOnce) && app[:len(inproc.CrashOnce)] == inproc.CrashOnce {
		return app[len(inproc.CrashOnce):], true
	}
	return "", false
}

// waitAll waits until every job is finished and returns the state.
func (c *tcluster) waitAll(d time.Duration, ids ...string) *state.State {
	c.t.Helper()
	var st *state.State
	poll.Until(c.t, d, fmt.Sprintf("jobs %v to finish", ids), func() bool {
		st = c.any().srv.LocalState()
		for _, id := range ids {
			if j := st.Jobs[id]; j == nil || !j.State.Terminal() {
				return false
			}
		}
		return true
	})
	return st
}

// kindOf names a message for the drop rules.
func kindOf(m any) string {
	switch m := m.(type) {
	case *pb.Assign:
		return "assign"
	case *pb.AssignAck, *pb.LeaseAck:
		return "ack"
	case *pb.Bid:
		return "bid"
	case *pb.WorkerExited:
		return "exit"
	case *pb.WorkerReports:
		for _, r := range m.Reports {
			if r.Done {
				return "done"
			}
		}
		return "report"
	}
	return ""
}

// drop drops the first n messages of a kind that match.
func (c *tcluster) drop(kind string, n int, match func(any) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if match == nil {
		match = func(any) bool { return true }
	}
	c.drops[kind] = &dropRule{match: match, n: n}
}

func (c *tcluster) dropped(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.drops[kind]; r != nil {
		return r.dropped
	}
	return 0
}

// pass records a message and reports whether it goes through.
func (c *tcluster) pass(m any) bool {
	kind := kindOf(m)
	if kind == "" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[kind]++
	switch m := m.(type) {
	case *pb.Bid:
		c.bids[m.Job] = append(c.bids[m.Job], m)
	case *pb.Assign:
		c.assigns[m.Generation]++
		for _, r := range m.Runs {
			c.runs[r.Job] = append(c.runs[r.Job], r)
		}
	}
	if r := c.drops[kind]; r != nil && r.dropped < r.n && r.match(m) {
		r.dropped++
		return false
	}
	return true
}

func (c *tcluster) sendDrops(next actor.SenderFunc) actor.SenderFunc {
	return func(ctx actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
		if !c.pass(env.Message) {
			return
		}
		c.mu.Lock()
		d := c.delays[kindOf(env.Message)]
		c.mu.Unlock()
		if d > 0 {
			time.AfterFunc(d, func() { next(ctx, target, env) })
			return
		}
		next(ctx, target, env)
	}
}

// delay holds every message of a kind for d on its way (0: no more).
func (c *tcluster) delay(kind string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delays[kind] = d
}

func (c *tcluster) receiveDrops(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
		if _, ok := env.Message.(*pb.Assign); ok && !c.pass(env.Message) {
			return // lost on the way: no answer
		}
		next(ctx, env)
	}
}

// roundMark is how many rounds the leaders have recorded so far.
func (c *tcluster) roundMark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.rounds)
}

// waitRounds waits until n committed rounds recorded after mark (a
// roundMark) satisfy ok (nil: any).
func (c *tcluster) waitRounds(what string, mark, n int, ok func(allocator.RoundInfo) bool) {
	c.t.Helper()
	poll.Until(c.t, 60*time.Second, what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		got := 0
		for _, r := range c.rounds[mark:] {
			if r.Committed && (ok == nil || ok(r)) {
				got++
			}
		}
		return got >= n
	})
}
