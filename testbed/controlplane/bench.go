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
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"
	"gonum.org/v1/gonum/stat"

	"pollux/actors/allocator"
	"pollux/actors/job"
	"pollux/actors/node"
	"pollux/actors/node/workerproto"
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
	Nodes                    int       `json:"nodes"`
	Jobs                     int       `json:"jobs"`
	RoundS                   MedianP95 `json:"round_s"`
	RaftWritesPerRound       float64   `json:"raft_writes_per_round"`
	RaftBytesPerRound        float64   `json:"raft_bytes_per_round"`
	ReportsPerS              float64   `json:"reports_per_s"`
	FirstRoundAfterFailoverS MedianMax `json:"first_round_after_failover_s"`
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
	// Local puts every actor in one actor system (no gRPC).
	Local bool
	// Insecure runs the Raft ports and the actors' gRPC in plaintext (a
	// baseline); otherwise a CA made for the run secures both with
	// mutual TLS, the actors' gRPC through RemoteOptions.
	Insecure bool
	// RemoteOptions configure an actor system's gRPC as servers and
	// agents do, secured with creds (nil: plaintext, with Insecure);
	// required unless Local.
	RemoteOptions func(creds *pki.Credentials, log *slog.Logger) ([]remote.ConfigOption, error)
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
		o.Warmup < 0 || o.Settle < 0 || o.Heartbeat <= 0 || o.Election <= 0 || o.Lease <= 0:
		return fmt.Errorf("%w: %d nodes, %d jobs, %d GPUs, %d rounds, %d failovers, interval %v, reports every %v, Raft timeouts %v/%v/%v: want positive (failovers, warm-up and settling >= 0)",
			ErrConfig, o.Nodes, o.Jobs, o.GPUs, o.Rounds, o.Failovers, o.Interval, o.ReportEvery, o.Heartbeat, o.Election, o.Lease)
	case o.Nodes > 4096 || o.Jobs > 8192:
		return fmt.Errorf("%w: at most 4096 nodes and 8192 jobs in one process", ErrConfig)
	case lvl.UnmarshalText([]byte(o.LogLevel)) != nil:
		return fmt.Errorf("%w: log level %q", ErrConfig, o.LogLevel)
	case !o.Local && o.RemoteOptions == nil:
		return fmt.Errorf("%w: gRPC needs RemoteOptions", ErrConfig)
	}
	return nil
}

// server is one in-process server.
type server struct {
	id, dir, raftAddr string
	srv               *consensus.Server
	sys               *actor.ActorSystem
	rem               *remote.Remote
	alloc, host       *actor.PID
	down              bool
}

type bench struct {
	o       Options
	log     *slog.Logger
	quiet   *slog.Logger
	lib     *slog.Logger // protoactor's, which logs every lost connection as an error
	cat     testbed.Catalog
	dir     string
	tls     *pki.Bundle // nil: --insecure
	peers   []raft.Server
	servers []*server
	shared  *actor.ActorSystem // local transport: everyone's
	nodeSys *actor.ActorSystem
	nodeRem *remote.Remote
	nodes   []*node.Node
	reports atomic.Int64 // taken in by job actors
	offered atomic.Int64 // sent by workers

	mu     sync.Mutex
	rounds []round
	agents []cluster.Member
}

type round struct {
	server string
	info   allocator.RoundInfo
}

// Run runs the benchmark and reports what it measured; progress
// receives its log lines.
func Run(ctx context.Context, o Options, progress io.Writer) (rep *Report, err error) {
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
	b := &bench{o: o, cat: cat, dir: dir,
		log:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelInfo})),
		quiet: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: lvl})),
		lib:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: max(lvl, slog.LevelError+1)}))}
	defer b.stop()
	if !o.Insecure {
		if b.tls, err = pki.DevBundle(filepath.Join(dir, "tls"), []string{"s0", "s1", "s2"}, []string{nodesIdentity}); err != nil {
			return nil, err
		}
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	rep = &Report{Nodes: o.Nodes, Jobs: o.Jobs}
	if err := b.warmUp(ctx); err != nil {
		return nil, err
	}
	if err := b.timeRounds(ctx, rep); err != nil {
		return nil, err
	}
	if err := b.timeFailovers(ctx, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// nodesIdentity is the identity of the actor system of every node actor.
const nodesIdentity = "nodes"

// credentials are identity name's (nil with Insecure).
func (b *bench) credentials(name string) (*pki.Credentials, error) {
	if b.tls == nil {
		return nil, nil
	}
	return b.tls.Credentials(name)
}

// newSystem starts an actor system with remote, as identity name.
func (b *bench) newSystem(name string) (*actor.ActorSystem, *remote.Remote, error) {
	creds, err := b.credentials(name)
	if err != nil {
		return nil, nil, err
	}
	opts, err := b.o.RemoteOptions(creds, b.lib)
	if err != nil {
		return nil, nil, err
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return b.lib }))
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, opts...))
	rem.Start()
	return sys, rem, nil
}

// listenRaft opens server id's Raft port on addr (mutual TLS with its
// server certificate unless Insecure).
func (b *bench) listenRaft(id, addr string) (*consensus.Transport, error) {
	creds, err := b.credentials(id)
	if err != nil {
		return nil, err
	}
	var rt *consensus.TLS
	if creds != nil {
		srv, err1 := creds.ServerConfig(pki.ChannelRaft)
		cli, err2 := creds.ClientConfig(pki.ChannelRaft)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		rt = &consensus.TLS{Server: srv, Client: cli}
	}
	return consensus.ListenTCP(addr, b.raftConfig(id), rt)
}

func (b *bench) start(ctx context.Context) error {
	o := b.o
	if o.Local {
		b.shared = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return b.lib }))
		b.nodeSys = b.shared
	} else {
		var err error
		if b.nodeSys, b.nodeRem, err = b.newSystem(nodesIdentity); err != nil {
			return err
		}
	}
	// Raft: three servers over TCP (TLS unless --insecure), bolt logs.
	trans := make([]*consensus.Transport, 3)
	for i := range trans {
		id := fmt.Sprintf("s%d", i)
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
	leader, err := b.leader(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	// The nodes, registered up front (gossip would, one write each).
	l := &inproc.Launcher{Catalog: b.cat, TimeScale: 1, Tick: o.ReportEvery, ReportEvery: o.ReportEvery, AllRanks: true, Logger: b.quiet}
	var setup []state.Command
	init := state.NewInitCluster(filepath.Join(b.dir, "checkpoints"))
	init.ID = "bench"
	setup = append(setup, &init)
	for i := range o.Nodes {
		name := fmt.Sprintf("n%04d", i)
		nd, err := node.Start(b.nodeSys, node.Config{Name: name, GPUs: o.GPUs, ReportListen: "none", ActorName: "node-" + name,
			Launch: func(s node.WorkerSpec) (node.Worker, error) {
				deliver := s.Report
				s.Report = func(r workerproto.Report) { b.offered.Add(1); deliver(r) }
				return l.Launch(s)
			}, Emulator: func(app string) []string { return []string{"inproc", app} }, Grace: 5 * time.Second,
			WorkerOutput: io.Discard, Logger: b.quiet})
		if err != nil {
			return err
		}
		b.nodes = append(b.nodes, nd)
		b.agents = append(b.agents, cluster.Member{Name: name, Meta: cluster.Meta{Role: cluster.RoleAgent, GPUs: o.GPUs, ActorAddr: b.nodeSys.Address()}})
		setup = append(setup, &state.RegisterNode{Node: state.Node{ID: name, Addresses: []string{b.nodeSys.Address()}, GPUs: o.GPUs, Health: state.Alive}})
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
	for i := range o.Jobs {
		app := apps[i%len(apps)]
		id := fmt.Sprintf("job-%05d", i)
		// A cluster in its steady state: jobs submitted over the last
		// four hours (a job seconds old is never worth a restart).
		setup = append(setup, &state.SubmitJob{ID: id, SubmitTime: now - 4*3600*rng.Float64(),
			Spec: state.JobSpec{Name: id, App: app, MinReplicas: 1, MaxReplicas: 8, Limits: b.cat[app].Limits()}})
	}
	for chunk := range slices.Chunk(setup, 512) {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := leader.srv.Apply(c, chunk...)
		cancel()
		if err != nil {
			return fmt.Errorf("controlplane: setup: %w", err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("controlplane: setup: %w", r.Err)
			}
		}
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

func (b *bench) raftConfig(id string) consensus.Config {
	cfg := consensus.DefaultConfig(raft.ServerID(id))
	cfg.Logger = b.lib
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = b.o.Heartbeat, b.o.Election, b.o.Lease
	return cfg
}

// openRaft opens s's Raft node on t; followers forward writes over the
// Raft port, as in production.
func (b *bench) openRaft(s *server, t *consensus.Transport) error {
	cfg := b.raftConfig(s.id)
	srv, err := consensus.OpenDisk(cfg, s.dir, t, t.Forwarder())
	if err != nil {
		_ = t.Close()
		return err
	}
	s.srv = srv
	return nil
}

func (b *bench) startActors(s *server) error {
	if b.o.Local {
		s.sys = b.shared
	} else {
		var err error
		if s.sys, s.rem, err = b.newSystem(s.id); err != nil {
			return err
		}
	}
	hprops, err := job.NewHost(job.HostConfig{Server: s.id, Store: s.srv, Reports: &b.reports, Logger: b.quiet})
	if err != nil {
		return err
	}
	if s.host, err = s.sys.Root.SpawnNamed(hprops, "jobhost-"+s.id); err != nil {
		return err
	}
	id := s.id
	props, err := allocator.NewAllocator(allocator.Config{Store: s.srv, Server: s.id, Members: b.members, Interval: b.o.Interval,
		MaxFailures: -1, Logger: b.quiet,
		NodePID: func(n *state.Node) *actor.PID { return actor.NewPID(n.Addresses[0], "node-"+n.ID) },
		HostPID: func(m cluster.Member) *actor.PID { return actor.NewPID(m.Meta.ActorAddr, "jobhost-"+m.Name) },
	}, func(ri allocator.RoundInfo) {
		b.mu.Lock()
		b.rounds = append(b.rounds, round{server: id, info: ri})
		b.mu.Unlock()
	})
	if err != nil {
		return err
	}
	s.alloc, err = s.sys.Root.SpawnNamed(props, "allocator-"+s.id)
	b.mu.Lock()
	s.down = false
	b.mu.Unlock()
	return err
}

// members is what gossip would say.
func (b *bench) members() []cluster.Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := slices.Clone(b.agents)
	for _, s := range b.servers {
		if !s.down {
			out = append(out, cluster.Member{Name: s.id, Meta: cluster.Meta{Role: cluster.RoleServer, ActorAddr: s.sys.Address()}})
		}
	}
	return out
}

func (b *bench) leader(ctx context.Context, d time.Duration) (*server, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, s := range b.servers {
			if s.srv == nil {
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
		l, err := b.leader(ctx, 10*time.Second)
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
		l, err := b.leader(ctx, 10*time.Second)
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
func (b *bench) timeRounds(ctx context.Context, rep *Report) error {
	var err error
	for range 3 {
		if err = b.timeRoundsOnce(ctx, rep); !errors.Is(err, errLeaderMoved) {
			return err
		}
		b.log.Warn("controlplane: timing again", "err", err)
	}
	return err
}

var errLeaderMoved = errors.New("controlplane: leadership moved while timing rounds")

func (b *bench) timeRoundsOnce(ctx context.Context, rep *Report) error {
	l, err := b.leader(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	// From the end of a round to the end of the R-th next one.
	m := b.mark()
	if err := b.waitRounds(ctx, m, 1, 60*time.Second); err != nil {
		return err
	}
	if b.o.CPUProfile != "" {
		f, err := os.Create(b.o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	idx0, rep0, off0, t0 := l.srv.LastIndex(), b.reports.Load(), b.offered.Load(), time.Now()
	m = b.mark()
	if err := b.waitRounds(ctx, m, b.o.Rounds, time.Duration(b.o.Rounds+30)*(b.o.Interval+5*time.Second)); err != nil {
		return err
	}
	idx1, rep1, off1, t1 := l.srv.LastIndex(), b.reports.Load(), b.offered.Load(), time.Now()
	rounds := b.roundsSince(m)[:b.o.Rounds]
	var ds []float64
	for _, r := range rounds {
		if r.server != l.id {
			return fmt.Errorf("%w: from %s to %s", errLeaderMoved, l.id, r.server)
		}
		ds = append(ds, r.info.Duration.Seconds())
	}
	// The window holds the R rounds (and the end of the one before).
	entries, bytes, byCommand, err := l.srv.LogStats(idx0, idx1)
	if err != nil {
		return err
	}
	slices.Sort(ds)
	rep.RoundS = MedianP95{Median: stat.Quantile(0.5, stat.Empirical, ds, nil), P95: stat.Quantile(0.95, stat.Empirical, ds, nil)}
	rep.RaftWritesPerRound = float64(entries) / float64(b.o.Rounds)
	rep.RaftBytesPerRound = float64(bytes) / float64(b.o.Rounds)
	rep.ReportsPerS = float64(rep1-rep0) / t1.Sub(t0).Seconds()
	b.log.Info("controlplane: rounds timed", "rounds", len(ds), "median_s", rep.RoundS.Median, "p95_s", rep.RoundS.P95,
		"entries", entries, "by_command", fmt.Sprint(byCommand), "bytes", bytes, "reports_per_s", rep.ReportsPerS, "offered_per_s", float64(off1-off0)/t1.Sub(t0).Seconds(),
		"jobs_placed", rounds[len(rounds)-1].info.Jobs, "gpus_used", rounds[len(rounds)-1].info.GPUsUsed)
	return nil
}

func (b *bench) timeFailovers(ctx context.Context, rep *Report) error {
	var samples []float64
	for i := range b.o.Failovers {
		l, err := b.leader(ctx, 10*time.Second)
		if err != nil {
			return err
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
				return fmt.Errorf("controlplane: no new leader's round within 30 s of killing %s", l.id)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		s := first.info.Began.Add(first.info.Duration).Sub(first.info.Elected).Seconds()
		samples = append(samples, s)
		b.log.Info("controlplane: failover", "trial", i+1, "killed", l.id, "new_leader", first.server,
			"elected_after_kill_s", first.info.Elected.Sub(killed).Seconds(), "first_round_after_election_s", s,
			"began_after_election_s", first.info.Began.Sub(first.info.Elected).Seconds(), "decided_s", first.info.Decided.Seconds(), "round_s", first.info.Duration.Seconds())
		if err := b.restart(ctx, l); err != nil {
			return err
		}
	}
	if len(samples) > 0 {
		slices.Sort(samples)
		rep.FirstRoundAfterFailoverS = MedianMax{Median: stat.Quantile(0.5, stat.Empirical, samples, nil), Max: samples[len(samples)-1]}
	}
	return nil
}

// kill stops a server at once, as a crash would: its actors, its Raft
// node and its actor system's listener.
func (b *bench) kill(s *server) {
	_ = s.sys.Root.StopFuture(s.alloc).Wait()
	_ = s.sys.Root.StopFuture(s.host).Wait()
	_ = s.srv.Shutdown()
	if s.rem != nil {
		s.rem.Shutdown(false)
	}
	// Gossip notices a dead member within about a second (--fast-gossip).
	time.AfterFunc(time.Second, func() {
		b.mu.Lock()
		s.down = true
		b.mu.Unlock()
	})
}

// restart reopens a killed server on its data directory and waits until
// it has caught up and two rounds have passed.
func (b *bench) restart(ctx context.Context, s *server) error {
	time.Sleep(1100 * time.Millisecond) // after gossip has marked it down
	var t *consensus.Transport
	var err error
	for range 50 {
		if t, err = b.listenRaft(s.id, s.raftAddr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	if err := b.openRaft(s, t); err != nil {
		return err
	}
	if err := b.startActors(s); err != nil {
		return err
	}
	l, err := b.leader(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for s.srv.LastIndex()+10 < l.srv.LastIndex() {
		if time.Now().After(deadline) {
			return fmt.Errorf("controlplane: %s did not catch up", s.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b.waitRounds(ctx, b.mark(), 2, 60*time.Second)
}

func (b *bench) stop() {
	for _, s := range b.servers {
		if s.srv == nil {
			continue
		}
		if s.sys != nil && s.alloc != nil {
			_ = s.sys.Root.StopFuture(s.alloc).Wait()
			_ = s.sys.Root.StopFuture(s.host).Wait()
		}
		_ = s.srv.Shutdown()
		if s.rem != nil {
			s.rem.Shutdown(false)
		}
	}
	for _, n := range b.nodes {
		_ = n.Stop(10 * time.Second)
	}
	if b.nodeRem != nil {
		b.nodeRem.Shutdown(false)
	}
}
