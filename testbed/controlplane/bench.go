package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"
	"gonum.org/v1/gonum/stat"

	"pollux/actors/allocator"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/inproc"
)

// ErrConfig is returned for unusable options.
var ErrConfig = errors.New("controlplane: bad options")

// Report is what `pollux bench controlplane --json` prints.
type Report struct {
	Nodes int `json:"nodes"`
	Jobs  int `json:"jobs"`
	// IntervalS is the scheduling interval the rounds ran at;
	// AgentLeaseS the nodes' lease.
	IntervalS   float64 `json:"interval_s"`
	AgentLeaseS float64 `json:"agent_lease_s"`
	// Transport is remote (every node and server an actor system with a
	// listener of its own) or local (one actor system); TLS says the
	// listeners, Raft and gossip were secured. NodeEndpoints counts the
	// distinct actor addresses of the node actors, ActorSystems the actor
	// systems, and GossipMembers the alive members the leader's gossip
	// listed, when the timing began.
	Transport     string `json:"transport"`
	TLS           bool   `json:"tls"`
	NodeEndpoints int    `json:"node_endpoints"`
	ActorSystems  int    `json:"actor_systems"`
	GossipMembers int    `json:"gossip_members"`
	// NodeProcesses counts the processes the nodes ran in apart from the
	// servers' (0: all in one process).
	NodeProcesses int `json:"node_processes"`
	// RoundS is the leader's rounds' time, from the tick to the last
	// node's acknowledgement.
	RoundS             MedianP95 `json:"round_s"`
	RaftWritesPerRound float64   `json:"raft_writes_per_round"`
	RaftBytesPerRound  float64   `json:"raft_bytes_per_round"`
	ReportsPerS        float64   `json:"reports_per_s"`
	// LeaseLapses counts the nodes' leases that lapsed during the timed
	// rounds (each pauses a node's workers until a renewal).
	LeaseLapses int64 `json:"lease_lapses"`
	// SearchEffort and FitnessVsFull summarise the timed rounds and the
	// new leaders' first rounds (Rounds, Failovers).
	SearchEffort  MinMedian `json:"search_effort"`
	FitnessVsFull MinMedian `json:"fitness_vs_full"`
	// FirstRoundAfterFailoverS runs from the new leader's election to the
	// end of its first round (the last acknowledgement);
	// FailoverToFirstRoundS from the old leader's kill to the commit of
	// the new leader's first round (failure detection and the election
	// included).
	FirstRoundAfterFailoverS MedianMax  `json:"first_round_after_failover_s"`
	FailoverToFirstRoundS    MedianMax  `json:"failover_to_first_round_s"`
	Rounds                   []Round    `json:"rounds"`
	Failovers                []Failover `json:"failovers"`
	// SetupS is the time until every node had joined the gossip and the
	// servers' actors ran; ElapsedS the whole run's; PeakRSSMiB the
	// process's peak resident memory; Goroutines how many ran when the
	// timing began.
	SetupS     float64 `json:"setup_s"`
	ElapsedS   float64 `json:"elapsed_s"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	Goroutines int     `json:"goroutines"`
}

// Failover is one leader kill.
type Failover struct {
	Killed    string `json:"killed"`
	NewLeader string `json:"new_leader"`
	// ElectedAfterKillS is when the new leader learnt it won;
	// FirstRoundCommittedAfterKillS when its first round was committed;
	// FirstRoundAfterElectionS the end of that round from the election.
	ElectedAfterKillS             float64 `json:"elected_after_kill_s"`
	FirstRoundCommittedAfterKillS float64 `json:"first_round_committed_after_kill_s"`
	FirstRoundAfterElectionS      float64 `json:"first_round_after_election_s"`
	// Round is the new leader's first round.
	Round Round `json:"round"`
}

// MedianP95 are two quantiles of a sample, in seconds.
type MedianP95 struct {
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
}

// MedianMax are the median and the maximum of a sample, in seconds.
type MedianMax struct {
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// Options configure a run.
type Options struct {
	// Nodes node actors of GPUs GPUs each; Jobs jobs.
	Nodes, Jobs, GPUs int
	// Rounds are timed; then Failovers leader kills.
	Rounds, Failovers int
	// Interval is the scheduling interval; ReportEvery the time between
	// two reports of one worker (every rank reports).
	Interval, ReportEvery time.Duration
	// Warmup bounds the wait for the jobs to be placed; Settle is how long
	// they run (profile, bid, scale out) before the timing.
	Warmup, Settle time.Duration
	// Heartbeat, Election and Lease are the servers' Raft timeouts.
	Heartbeat, Election, Lease time.Duration
	// AgentLease is the nodes' lease (the allocator's Config.Lease).
	AgentLease time.Duration
	// Local puts every actor in one actor system (no gRPC).
	Local bool
	// Insecure runs Raft, the actors' gRPC and gossip in plaintext (a
	// baseline); otherwise a CA made for the run gives every server and
	// node a certificate of its own, and gossip is encrypted with a key
	// made for the run.
	Insecure bool
	// RemoteOptions configure an actor system's gRPC as servers and
	// agents do, secured with creds (nil: plaintext, with Insecure);
	// required unless Local.
	RemoteOptions func(creds *pki.Credentials, log *slog.Logger) ([]remote.ConfigOption, error)
	// Executable, if set, is the pollux binary: with the remote
	// transport the nodes then run in a process of their own
	// (NodesCommand, nicer by NodeProcessNice), so that their gossip and
	// workers do not take the servers' cores; empty: in this process.
	Executable string
	// LogLevel of the servers and nodes (debug, info, warn or error).
	LogLevel string
	// CPUProfile, if set, receives a CPU profile of the timed rounds.
	CPUProfile string
}

// Validate checks the options.
func (o Options) Validate() error {
	var lvl slog.Level
	switch {
	case o.Nodes < 1 || o.Jobs < 1 || o.GPUs < 1 || o.Rounds < 1 || o.Failovers < 0 || o.Interval <= 0 || o.ReportEvery <= 0 ||
		o.Warmup < 0 || o.Settle < 0 || o.Heartbeat <= 0 || o.Election <= 0 || o.Lease <= 0 || o.AgentLease <= 0:
		return fmt.Errorf("%w: %d nodes, %d jobs, %d GPUs, %d rounds, %d failovers, interval %v, reports every %v, Raft timeouts %v/%v/%v, agents' lease %v: want positive (failovers, warm-up and settling >= 0)",
			ErrConfig, o.Nodes, o.Jobs, o.GPUs, o.Rounds, o.Failovers, o.Interval, o.ReportEvery, o.Heartbeat, o.Election, o.Lease, o.AgentLease)
	case o.Nodes > 4096 || o.Jobs > 8192:
		return fmt.Errorf("%w: at most 4096 nodes and 8192 jobs in one process", ErrConfig)
	case lvl.UnmarshalText([]byte(o.LogLevel)) != nil:
		return fmt.Errorf("%w: log level %q", ErrConfig, o.LogLevel)
	case !o.Local && o.RemoteOptions == nil:
		return fmt.Errorf("%w: gRPC needs RemoteOptions", ErrConfig)
	}
	return nil
}

type bench struct {
	o          Options
	log        *slog.Logger
	quiet      *slog.Logger
	lib        *slog.Logger // the libraries', which log every lost connection as an error
	cat        testbed.Catalog
	dir        string
	tls        *pki.Bundle // nil: --insecure
	gossipKeys [][]byte
	launcher   *inproc.Launcher
	peers      []raft.Server
	servers    []*server
	shared     *actor.ActorSystem // local transport: everyone's
	nodes      []*nodeHost
	reports    atomic.Int64 // taken in by job actors
	offered    atomic.Int64 // sent by workers of this process
	lapses     atomic.Int64 // leases lapsed on nodes of this process
	// remoteOffered are the reports sent by the workers of the node
	// process (nodeProc, nil: none) so far, remoteLapses the leases
	// lapsed on its nodes.
	remoteOffered, remoteLapses atomic.Int64
	nodeProc                    *nodeProcess
	progress                    io.Writer
	// creds, if set, loads an identity's credentials (the node process);
	// otherwise they come from tls.
	creds func(name string) (*pki.Credentials, error)

	mu     sync.Mutex
	rounds []round
}

type round struct {
	server string
	info   allocator.RoundInfo
}

// Run runs the benchmark and reports what it measured; progress
// receives its log lines.
func Run(ctx context.Context, o Options, progress io.Writer) (rep *Report, err error) {
	begin := time.Now()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(o.LogLevel)) // checked by Validate
	cat, err := builtin.Catalog()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pollux-bench-cp-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b := &bench{o: o, cat: cat, dir: dir, progress: progress,
		log:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelInfo})),
		quiet: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: lvl})),
		lib:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: max(lvl, slog.LevelError+1)}))}
	b.launcher = &inproc.Launcher{Catalog: cat, TimeScale: 1, Tick: o.ReportEvery, ReportEvery: o.ReportEvery, AllRanks: true, Logger: b.quiet}
	stopped := false
	defer func() {
		if !stopped {
			b.stop()
		}
	}()
	rep = &Report{Nodes: o.Nodes, Jobs: o.Jobs, IntervalS: o.Interval.Seconds(), AgentLeaseS: o.AgentLease.Seconds(), Transport: map[bool]string{true: "local", false: "remote"}[o.Local], TLS: !o.Insecure}
	if b.nodesApart() {
		rep.NodeProcesses = 1
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	rep.SetupS = time.Since(begin).Seconds()
	if err := b.warmUp(ctx); err != nil {
		return nil, err
	}
	timed, err := b.timeRounds(ctx, rep)
	if err != nil {
		return nil, err
	}
	fails, err := b.timeFailovers(ctx, rep)
	if err != nil {
		return nil, err
	}
	// The decisions are judged once the cluster has stopped, so that the
	// searches of full effort take no time from it.
	b.stop()
	stopped = true
	if err := b.judgeAll(rep, timed, fails); err != nil {
		return nil, err
	}
	rep.PeakRSSMiB = peakRSSMiB()
	rep.ElapsedS = time.Since(begin).Seconds()
	return rep, nil
}

// serverNames are the three servers' names.
var serverNames = []string{"s0", "s1", "s2"}

// nodeName is node i's name.
func nodeName(i int) string { return fmt.Sprintf("n%04d", i) }

func (b *bench) start(ctx context.Context) error {
	o := b.o
	if !o.Insecure {
		// A certificate per server and per node: each node's listener is
		// its own endpoint (the local transport has no listeners).
		var agents []string
		if !o.Local {
			for i := range o.Nodes {
				agents = append(agents, nodeName(i))
			}
		}
		var err error
		if b.tls, err = pki.DevBundle(filepath.Join(b.dir, "tls"), serverNames, agents); err != nil {
			return err
		}
		if b.gossipKeys, err = b.tls.GossipKeys(); err != nil {
			return err
		}
	}
	if o.Local {
		b.shared = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return b.lib }))
	}
	// Raft: three servers over TCP (TLS unless --insecure), bolt logs.
	trans := make([]*consensus.Transport, len(serverNames))
	for i, id := range serverNames {
		t, err := b.listenRaft(id, "127.0.0.1:0")
		if err != nil {
			return err
		}
		trans[i] = t
		s := &server{id: id, dir: filepath.Join(b.dir, id), raftAddr: string(t.LocalAddr())}
		b.servers = append(b.servers, s)
		b.peers = append(b.peers, raft.Server{ID: raft.ServerID(id), Address: t.LocalAddr()})
	}
	for i, s := range b.servers {
		if err := b.openRaft(s, trans[i]); err != nil {
			return err
		}
	}
	if err := b.servers[0].srv.Bootstrap(b.peers); err != nil {
		return err
	}
	leader, err := b.leader(ctx, leaderWait)
	if err != nil {
		return err
	}
	for _, s := range b.servers {
		if err := b.startMember(s); err != nil {
			return err
		}
	}
	var seeds, names []string
	for _, s := range b.servers {
		seeds = append(seeds, s.gossip.Addr())
	}
	for i := range o.Nodes {
		names = append(names, nodeName(i))
	}
	start := b.startNodes
	if b.nodesApart() {
		start = b.startNodeProcess
	}
	if err := start(ctx, names, seeds); err != nil {
		return err
	}
	if err := b.awaitGossip(ctx, 3*time.Minute); err != nil {
		return err
	}
	if err := b.setup(ctx, leader); err != nil {
		return err
	}
	if !o.Local {
		b.connect(ctx)
	}
	b.log.Info("controlplane: cluster up", "nodes", o.Nodes, "gpus", o.Nodes*o.GPUs, "jobs", o.Jobs,
		"transport", map[bool]string{true: "local", false: "remote"}[o.Local], "tls", b.tls != nil)
	for _, s := range b.servers {
		if err := b.startActors(s); err != nil {
			return err
		}
	}
	return nil
}

// connect has every server ask every node for its status, a few at a
// time, before the allocators start: the servers' and the nodes'
// connections to each other (both directions, mutual TLS) are then up
// before the timing, as in a cluster whose agents joined long ago,
// rather than hundreds of handshakes reaching the servers at once with
// the first round. A node that does not answer is left to connect later.
func (b *bench) connect(ctx context.Context) {
	begin := time.Now()
	var failed atomic.Int64
	for _, s := range b.servers {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= len(b.nodes) || ctx.Err() != nil {
						return
					}
					pid := actor.NewPID(b.nodes[i].addr, b.actorName(pb.NodeActor, b.nodes[i].name))
					var err error
					for range 3 {
						if _, err = s.sys.Root.RequestFuture(pid, &pb.StatusRequest{}, 10*time.Second).Result(); err == nil {
							break
						}
					}
					if err != nil {
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	b.log.Info("controlplane: servers and nodes connected", "took_s", time.Since(begin).Seconds(), "unanswered", failed.Load())
}

// nodesApart says whether the nodes run in a process of their own.
func (b *bench) nodesApart() bool { return !b.o.Local && b.o.Executable != "" }

// startNodes starts the named nodes in this process, a few at a time,
// each joining the gossip of seeds.
func (b *bench) startNodes(ctx context.Context, names, seeds []string) error {
	b.nodes = make([]*nodeHost, len(names))
	var next atomic.Int64
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(names) || ctx.Err() != nil {
					return
				}
				h, err := b.startNode(ctx, names[i], seeds)
				if err != nil {
					errs[w] = err
					return
				}
				b.nodes[i] = h
				if i%64 == 63 {
					b.log.Info("controlplane: nodes started", "nodes", i+1)
				}
			}
		}()
	}
	wg.Wait()
	b.nodes = slices.DeleteFunc(b.nodes, func(h *nodeHost) bool { return h == nil })
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// awaitGossip waits until every server's gossip lists every node and
// server alive.
func (b *bench) awaitGossip(ctx context.Context, within time.Duration) error {
	want := len(b.nodes) + len(b.servers)
	deadline := time.Now().Add(within)
	for {
		least, fewest := want, []cluster.Member(nil)
		for _, s := range b.servers {
			if m := s.gossip.Members(); len(m) < least {
				least, fewest = len(m), m
			}
		}
		if least == want {
			b.log.Info("controlplane: gossip converged", "members", want)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controlplane: a server's gossip lists %d of %d members after %v (missing: %s)", least, want, within, b.missing(fewest))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// missing names the bench's gossip members that listed does not hold,
// the first ten of them.
func (b *bench) missing(listed []cluster.Member) string {
	have := map[string]bool{}
	for _, m := range listed {
		have[m.Name] = true
	}
	var want, out []string
	for _, h := range b.nodes {
		want = append(want, h.name)
	}
	for _, s := range b.servers {
		want = append(want, s.gossip.Local().Name)
	}
	for _, n := range want {
		if !have[n] {
			out = append(out, n)
		}
	}
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return strings.Join(out, ", ")
}

// setup configures the cluster, registers the nodes as the leader would
// from their gossip (a write each; the leader's reconciliation then
// finds them registered as gossip shows them) and submits the jobs.
func (b *bench) setup(ctx context.Context, leader *server) error {
	init := state.NewInitCluster(filepath.Join(b.dir, "checkpoints"))
	init.ID = "bench"
	setup := []state.Command{&init}
	for _, h := range b.nodes {
		setup = append(setup, &state.RegisterNode{Node: state.Node{ID: h.name, Addresses: []string{h.addr}, GPUs: b.o.GPUs,
			Health: state.Alive}})
	}
	// Jobs of hours, as in a cluster's steady state: a job completing is a
	// Raft write of its own (FinishJob), which the timed rounds should not
	// count by the dozen.
	var apps []string
	for _, name := range b.cat.Names() {
		if a := b.cat[name]; jobSeconds(a) >= 3*3600 {
			apps = append(apps, name)
		}
	}
	if len(apps) == 0 {
		return errors.New("controlplane: no built-in application runs for hours")
	}
	now := float64(time.Now().UnixNano()) / 1e9
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b.o.Jobs {
		app := apps[i%len(apps)]
		id := fmt.Sprintf("job-%05d", i)
		// A cluster in its steady state: jobs submitted over the last
		// four hours (a job seconds old is never worth a restart).
		setup = append(setup, &state.SubmitJob{ID: id, SubmitTime: now - 4*3600*rng.Float64(),
			Spec: state.JobSpec{Name: id, App: app, MinReplicas: 1, MaxReplicas: 8, Limits: b.cat[app].Limits()}})
	}
	for chunk := range slices.Chunk(setup, 512) {
		if err := b.applySetup(ctx, leader, chunk); err != nil {
			return err
		}
	}
	return nil
}

// applySetup applies a chunk of the setup through s (a follower
// forwards it), again when leadership moved before its commit was known
// (a loaded machine may hold elections for long: the setup is not
// timed). On a retry, a job or a cluster configuration that exists was
// written by the attempt before.
func (b *bench) applySetup(ctx context.Context, s *server, chunk []state.Command) error {
	for try := 0; ; try++ {
		c, cancel := context.WithTimeout(ctx, 2*time.Minute)
		res, err := s.srv.Apply(c, chunk...)
		cancel()
		moved := errors.Is(err, consensus.ErrLeadershipLost) || errors.Is(err, consensus.ErrNotLeader) || errors.Is(err, consensus.ErrNoLeader)
		if moved && try < 5 && ctx.Err() == nil {
			b.log.Warn("controlplane: setup: applying again", "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("controlplane: setup: %w", err)
		}
		for _, r := range res {
			if r.Err != nil && !(try > 0 && (errors.Is(r.Err, state.ErrJobExists) || errors.Is(r.Err, state.ErrClusterConfig))) {
				return fmt.Errorf("controlplane: setup: %w", r.Err)
			}
		}
		return nil
	}
}

// leaderWait bounds the wait for a leader outside the timed figures: a
// loaded machine (the shared VM at load 40) holds elections for more
// than 10 s.
const leaderWait = time.Minute

func (b *bench) leader(ctx context.Context, d time.Duration) (*server, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b.mu.Lock()
		servers := slices.Clone(b.servers)
		b.mu.Unlock()
		for _, s := range servers {
			if s.srv == nil || s.down {
				continue
			}
			if _, l := s.srv.Leadership(); l {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil, errors.New("controlplane: no leader")
}

// roundsSince returns the committed rounds observed since mark from.
func (b *bench) roundsSince(from int) []round {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []round
	for _, r := range b.rounds[from:] {
		if r.info.Committed {
			out = append(out, r)
		}
	}
	return out
}

// mark is the position of the next round observed.
func (b *bench) mark() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rounds)
}

// warmUp waits until (nearly) every job is placed and its actor has bid,
// then for three more rounds.
func (b *bench) warmUp(ctx context.Context) error {
	deadline := time.Now().Add(b.o.Warmup)
	want := min(b.o.Jobs, b.o.Nodes*b.o.GPUs) * 9 / 10
	for {
		l, err := b.leader(ctx, leaderWait)
		if err != nil {
			return err
		}
		st := l.srv.LocalState()
		bids := 0
		for _, j := range st.Jobs {
			if j.Bid.Version > 0 {
				bids++
			}
		}
		placed := len(st.Allocation.Jobs)
		if placed >= want && bids >= b.o.Jobs*9/10 {
			b.log.Info("controlplane: warm", "placed", placed, "bids", bids)
			break
		}
		if time.Now().After(deadline) {
			b.log.Warn("controlplane: warm-up ended before the jobs were placed", "placed", placed, "bids", bids, "want", want)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		b.log.Info("controlplane: warming up", "placed", placed, "bids", bids, "reports", b.reports.Load())
	}
	settled := time.Now().Add(b.o.Settle)
	for time.Now().Before(settled) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(5*time.Second, time.Until(settled))):
		}
		l, err := b.leader(ctx, leaderWait)
		if err != nil {
			return err
		}
		b.log.Info("controlplane: settling", "gpus_used", gpusUsed(l.srv.LocalState()), "reports", b.reports.Load())
	}
	m := b.mark()
	return b.waitRounds(ctx, m, 3, 60*time.Second)
}

// jobSeconds is how long a job of a takes on one GPU at its initial
// batch.
func jobSeconds(a testbed.Application) float64 {
	step, _ := a.StepTimes([]int{1}, float64(a.Limits().InitBatch))
	return a.EpochEnd(a.MaxEpochs()) * step
}

func gpusUsed(st *state.State) int {
	n := 0
	for _, g := range st.UsedGPUs() {
		n += g
	}
	return n
}

func (b *bench) waitRounds(ctx context.Context, from, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for len(b.roundsSince(from)) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("controlplane: %d rounds not committed within %v", n, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// timeRounds times R consecutive rounds of one leader; if leadership
// moves meanwhile it says so and starts again (three times at most).
func (b *bench) timeRounds(ctx context.Context, rep *Report) ([]round, error) {
	var err error
	for range 3 {
		var rounds []round
		if rounds, err = b.timeRoundsOnce(ctx, rep); !errors.Is(err, errLeaderMoved) {
			return rounds, err
		}
		b.log.Warn("controlplane: timing again", "err", err)
	}
	return nil, err
}

var errLeaderMoved = errors.New("controlplane: leadership moved while timing rounds")

func (b *bench) timeRoundsOnce(ctx context.Context, rep *Report) ([]round, error) {
	l, err := b.leader(ctx, leaderWait)
	if err != nil {
		return nil, err
	}
	// From the end of a round to the end of the R-th next one.
	m := b.mark()
	if err := b.waitRounds(ctx, m, 1, 60*time.Second); err != nil {
		return nil, err
	}
	b.census(rep, l)
	if b.o.CPUProfile != "" {
		f, err := os.Create(b.o.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	idx0, rep0, off0, lap0, t0 := l.srv.LastIndex(), b.reports.Load(), b.offeredNow(), b.lapsesNow(), time.Now()
	m = b.mark()
	if err := b.waitRounds(ctx, m, b.o.Rounds, time.Duration(b.o.Rounds+30)*(b.o.Interval+5*time.Second)); err != nil {
		return nil, err
	}
	idx1, rep1, off1, lap1, t1 := l.srv.LastIndex(), b.reports.Load(), b.offeredNow(), b.lapsesNow(), time.Now()
	rounds := b.roundsSince(m)[:b.o.Rounds]
	var ds []float64
	for _, r := range rounds {
		if r.server != l.id {
			return nil, fmt.Errorf("%w: from %s to %s", errLeaderMoved, l.id, r.server)
		}
		ds = append(ds, r.info.Duration.Seconds())
	}
	// The window holds the R rounds (and the end of the one before).
	entries, bytes, byCommand, err := l.srv.LogStats(idx0, idx1)
	if err != nil {
		return nil, err
	}
	slices.Sort(ds)
	rep.RoundS = MedianP95{Median: stat.Quantile(0.5, stat.Empirical, ds, nil), P95: stat.Quantile(0.95, stat.Empirical, ds, nil)}
	rep.RaftWritesPerRound = float64(entries) / float64(b.o.Rounds)
	rep.RaftBytesPerRound = float64(bytes) / float64(b.o.Rounds)
	rep.ReportsPerS = float64(rep1-rep0) / t1.Sub(t0).Seconds()
	rep.LeaseLapses = lap1 - lap0
	b.log.Info("controlplane: rounds timed", "rounds", len(ds), "median_s", rep.RoundS.Median, "p95_s", rep.RoundS.P95,
		"entries", entries, "by_command", fmt.Sprint(byCommand), "bytes", bytes, "reports_per_s", rep.ReportsPerS, "lease_lapses", rep.LeaseLapses, "offered_per_s", float64(off1-off0)/t1.Sub(t0).Seconds(),
		"jobs_placed", rounds[len(rounds)-1].info.Jobs, "gpus_used", rounds[len(rounds)-1].info.GPUsUsed)
	return rounds, nil
}

// census counts, as the timing begins, the node endpoints, the actor
// systems, the leader's gossip members and the goroutines.
func (b *bench) census(rep *Report, l *server) {
	nodes, all := map[string]bool{}, map[string]bool{}
	for _, h := range b.nodes {
		nodes[h.addr], all[h.addr] = true, true
	}
	for _, s := range b.servers {
		all[b.actorAddr(s.sys)] = true
	}
	rep.NodeEndpoints, rep.ActorSystems = len(nodes), len(all)
	rep.GossipMembers = len(l.gossip.Members())
	rep.Goroutines = runtime.NumGoroutine()
}

// timeFailovers kills the leader Failovers times, each time waiting for
// the new leader's first round, then restarting the killed server.
func (b *bench) timeFailovers(ctx context.Context, rep *Report) ([]round, error) {
	var firsts []round
	for i := range b.o.Failovers {
		l, err := b.leader(ctx, leaderWait)
		if err != nil {
			return nil, err
		}
		m := b.mark()
		killed := time.Now()
		b.kill(l)
		var first *round
		deadline := time.Now().Add(30 * time.Second)
		for first == nil {
			for _, r := range b.roundsSince(m) {
				if r.server != l.id && r.info.FirstOfTerm && r.info.Elected.After(killed) {
					first = &r
					break
				}
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("controlplane: no new leader's round within 30 s of killing %s", l.id)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		ri := first.info
		f := Failover{Killed: l.id, NewLeader: first.server, ElectedAfterKillS: ri.Elected.Sub(killed).Seconds(),
			FirstRoundCommittedAfterKillS: ri.Began.Add(ri.Decided).Sub(killed).Seconds(),
			FirstRoundAfterElectionS:      ri.Began.Add(ri.Duration).Sub(ri.Elected).Seconds()}
		rep.Failovers = append(rep.Failovers, f)
		firsts = append(firsts, *first)
		b.log.Info("controlplane: failover", "trial", i+1, "killed", l.id, "new_leader", first.server,
			"elected_after_kill_s", f.ElectedAfterKillS, "committed_after_kill_s", f.FirstRoundCommittedAfterKillS,
			"first_round_after_election_s", f.FirstRoundAfterElectionS, "policy", ri.Policy, "round_s", ri.Duration.Seconds())
		if err := b.recover(ctx, l); err != nil {
			return nil, err
		}
	}
	var fromKill, fromElection []float64
	for _, f := range rep.Failovers {
		fromKill = append(fromKill, f.FirstRoundCommittedAfterKillS)
		fromElection = append(fromElection, f.FirstRoundAfterElectionS)
	}
	rep.FailoverToFirstRoundS, rep.FirstRoundAfterFailoverS = medianMax(fromKill), medianMax(fromElection)
	return firsts, nil
}

// recover restarts a killed server once the new leader's gossip has
// found it dead, and waits until it has caught up and two rounds have
// passed.
func (b *bench) recover(ctx context.Context, s *server) error {
	l, err := b.leader(ctx, leaderWait)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for slices.ContainsFunc(l.gossip.Members(), func(m cluster.Member) bool { return m.Name == s.id }) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if err := b.restart(s); err != nil {
		return err
	}
	deadline = time.Now().Add(60 * time.Second)
	for s.srv.LastIndex()+10 < l.srv.LastIndex() {
		if time.Now().After(deadline) {
			return fmt.Errorf("controlplane: %s did not catch up", s.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b.waitRounds(ctx, b.mark(), 2, 60*time.Second)
}

// judgeAll compares every timed round and every new leader's first
// round with a search of full effort on the same input.
func (b *bench) judgeAll(rep *Report, timed, firsts []round) error {
	var effort, quality []float64
	for _, r := range timed {
		j, err := judge(r.server, r.info)
		if err != nil {
			return err
		}
		rep.Rounds = append(rep.Rounds, j)
		effort, quality = append(effort, j.SearchEffort), append(quality, j.FitnessVsFull)
	}
	for i, r := range firsts {
		j, err := judge(r.server, r.info)
		if err != nil {
			return err
		}
		rep.Failovers[i].Round = j
		effort, quality = append(effort, j.SearchEffort), append(quality, j.FitnessVsFull)
	}
	rep.SearchEffort, rep.FitnessVsFull = minMedian(effort), minMedian(quality)
	b.log.Info("controlplane: rounds judged against searches of full effort", "rounds", len(quality),
		"fitness_vs_full_min", rep.FitnessVsFull.Min, "search_effort_median", rep.SearchEffort.Median)
	return nil
}

func medianMax(xs []float64) MedianMax {
	if len(xs) == 0 {
		return MedianMax{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return MedianMax{Median: stat.Quantile(0.5, stat.Empirical, s, nil), Max: s[len(s)-1]}
}

func (b *bench) stop() {
	for _, s := range b.servers {
		b.stopServer(s)
	}
	b.stopNodeProcess()
	var wg sync.WaitGroup
	for _, h := range b.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.stop()
		}()
	}
	wg.Wait()
}
