package main

import (
	"context"
	"encoding/json"
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
	"text/tabwriter"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	"gonum.org/v1/gonum/stat"

	"pollux/actors/control"
	"pollux/actors/job"
	"pollux/actors/node"
	"pollux/actors/workerproto"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/inproc"
)

func init() { benchCommands = append(benchCommands, newBenchControlPlaneCmd) }

// controlPlaneReport is what `pollux bench controlplane --json` prints.
type controlPlaneReport struct {
	Nodes                    int        `json:"nodes"`
	Jobs                     int        `json:"jobs"`
	RoundS                   medianP95  `json:"round_s"`
	RaftWritesPerRound       float64    `json:"raft_writes_per_round"`
	RaftBytesPerRound        float64    `json:"raft_bytes_per_round"`
	ReportsPerS              float64    `json:"reports_per_s"`
	FirstRoundAfterFailoverS medianMaxS `json:"first_round_after_failover_s"`
}

type medianP95 struct {
	Median float64 `json:"median"`
	P95    float64 `json:"p95"`
}

type medianMaxS struct {
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

type cpOpts struct {
	nodes, jobs, gpus, rounds, failovers  int
	interval, reportEvery, warmup, settle time.Duration
	heartbeat, election, lease            time.Duration
	local, insecure                       bool
	logLevel, cpuProfile                  string
}

func newBenchControlPlaneCmd() *cobra.Command {
	var (
		o         cpOpts
		transport string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "controlplane",
		Short: "Round time, Raft writes, report ingestion and failover of the whole control plane in one process",
		Long: "Runs a leader and two followers (Raft over TCP on 127.0.0.1, bolt logs in a temporary directory), each " +
			"with its allocator and job host, and --nodes node actors with --gpus GPUs each whose workers are emulated " +
			"in the process (no worker processes): --jobs jobs of the built-in applications that run for hours (bert, " +
			"deepspeech2, imagenet, yolov3), submitted over the last four hours, every rank reporting every " +
			"--report-every. Actors talk over protoactor's remote (one actor system per server, one for all nodes) " +
			"unless --transport local. After a warm-up it times --rounds rounds of the leader (from the tick to the last " +
			"node's acknowledgement, the search included), counts the Raft log entries and bytes they wrote and the " +
			"reports the job actors took in, then kills the leader --failovers times (restarting it afterwards) and " +
			"times each new leader's first round from its election to the last acknowledgement. Like every cluster, it runs " +
			"secured (a CA made for the run, mutual TLS on the Raft ports and the actors' gRPC) unless --insecure.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch transport {
			case "remote":
			case "local":
				o.local = true
			default:
				return badInput(fmt.Errorf("bench controlplane: --transport %q: want remote or local", transport))
			}
			if o.nodes < 1 || o.jobs < 1 || o.gpus < 1 || o.rounds < 1 || o.failovers < 0 || o.interval <= 0 || o.reportEvery <= 0 {
				return badInput(fmt.Errorf("bench controlplane: --nodes %d, --jobs %d, --gpus %d, --rounds %d, --failovers %d, --interval %v, --report-every %v: want positive (failovers >= 0)",
					o.nodes, o.jobs, o.gpus, o.rounds, o.failovers, o.interval, o.reportEvery))
			}
			if o.nodes > 4096 || o.jobs > 8192 {
				return badInput(fmt.Errorf("bench controlplane: at most 4096 nodes and 8192 jobs in one process"))
			}
			rep, err := runControlPlane(cmd.Context(), o, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "nodes\t%d\njobs\t%d\nround median / p95\t%.3f s / %.3f s\nraft writes per round\t%.2f\nraft bytes per round\t%.0f\nreports/s ingested\t%.0f\nfirst round after failover median / max\t%.3f s / %.3f s\n",
				rep.Nodes, rep.Jobs, rep.RoundS.Median, rep.RoundS.P95, rep.RaftWritesPerRound, rep.RaftBytesPerRound, rep.ReportsPerS,
				rep.FirstRoundAfterFailoverS.Median, rep.FirstRoundAfterFailoverS.Max)
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.nodes, "nodes", 512, "node actors")
	f.IntVar(&o.jobs, "jobs", 1024, "jobs")
	f.IntVar(&o.gpus, "gpus", 4, "GPUs per node")
	f.IntVar(&o.rounds, "rounds", 10, "rounds timed")
	f.IntVar(&o.failovers, "failovers", 5, "leader kills timed")
	f.DurationVar(&o.interval, "interval", time.Second, "scheduling interval")
	f.DurationVar(&o.reportEvery, "report-every", 50*time.Millisecond, "time between two reports of one worker (every rank reports)")
	f.DurationVar(&o.warmup, "warmup", 2*time.Minute, "longest wait for the jobs to be placed before timing")
	f.DurationVar(&o.settle, "settle", 20*time.Second, "time the placed jobs run (profile, bid, scale out) before timing")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Second, "Raft heartbeat timeout (Raft's own default: three servers and the whole cluster share this machine's cores)")
	f.DurationVar(&o.election, "election", time.Second, "Raft election timeout")
	f.DurationVar(&o.lease, "lease", 500*time.Millisecond, "Raft leader lease timeout")
	f.StringVar(&transport, "transport", "remote", "remote (protoactor over gRPC, one actor system per server) or local (one actor system)")
	f.BoolVar(&o.insecure, "insecure", false, "plaintext Raft and actor messages (a baseline for the cost of TLS)")
	f.StringVar(&o.logLevel, "log-level", "error", "log level of the servers and nodes (to stderr)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed rounds to this file")
	_ = f.MarkHidden("cpuprofile")
	return cmd
}

// cpServer is one in-process server.
type cpServer struct {
	id, dir, raftAddr string
	srv               *consensus.Server
	sys               *actor.ActorSystem
	rem               *remote.Remote
	alloc, host       *actor.PID
	down              bool
}

type cpBench struct {
	o       cpOpts
	log     *slog.Logger
	quiet   *slog.Logger
	lib     *slog.Logger // protoactor's, which logs every lost connection as an error
	cat     testbed.Catalog
	dir     string
	tls     *pki.Bundle // nil: --insecure
	peers   []raft.Server
	servers []*cpServer
	shared  *actor.ActorSystem // local transport: everyone's
	nodeSys *actor.ActorSystem
	nodeRem *remote.Remote
	nodes   []*node.Node
	reports atomic.Int64 // taken in by job actors
	offered atomic.Int64 // sent by workers

	mu     sync.Mutex
	rounds []cpRound
	agents []cluster.Member
}

type cpRound struct {
	server string
	info   control.RoundInfo
}

func runControlPlane(ctx context.Context, o cpOpts, progress io.Writer) (rep *controlPlaneReport, err error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, badInput(fmt.Errorf("bench controlplane: --log-level %q", o.logLevel))
	}
	cat, err := builtin.Catalog()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pollux-bench-cp-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b := &cpBench{o: o, cat: cat, dir: dir,
		log:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelInfo})),
		quiet: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: lvl})),
		lib:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: max(lvl, slog.LevelError+1)}))}
	defer b.stop()
	if !o.insecure {
		if b.tls, err = pki.DevBundle(filepath.Join(dir, "tls"), []string{"s0", "s1", "s2"}, []string{cpNodes}); err != nil {
			return nil, err
		}
	}
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	rep = &controlPlaneReport{Nodes: o.nodes, Jobs: o.jobs}
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

// cpNodes is the identity of the actor system of every node actor.
const cpNodes = "nodes"

// security is what identity name secures its channels with (nothing
// with --insecure).
func (b *cpBench) security(name string) (*security, error) {
	if b.tls == nil {
		return &security{}, nil
	}
	creds, err := b.tls.Credentials(name)
	if err != nil {
		return nil, err
	}
	return &security{creds: creds}, nil
}

// newSystem starts an actor system with remote, as identity name.
func (b *cpBench) newSystem(name string) (*actor.ActorSystem, *remote.Remote, error) {
	sec, err := b.security(name)
	if err != nil {
		return nil, nil, err
	}
	opts, err := sec.remoteOptions(b.lib)
	if err != nil {
		return nil, nil, err
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return b.lib }))
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, opts...))
	rem.Start()
	return sys, rem, nil
}

// listenRaft opens server id's Raft port on addr.
func (b *cpBench) listenRaft(id, addr string) (*consensus.Transport, error) {
	sec, err := b.security(id)
	if err != nil {
		return nil, err
	}
	rt, err := sec.raftTLS()
	if err != nil {
		return nil, err
	}
	return consensus.ListenTCP(addr, b.raftConfig(id), rt)
}

func (b *cpBench) start(ctx context.Context) error {
	o := b.o
	if o.local {
		b.shared = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return b.lib }))
		b.nodeSys = b.shared
	} else {
		var err error
		if b.nodeSys, b.nodeRem, err = b.newSystem(cpNodes); err != nil {
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
		s := &cpServer{id: id, dir: filepath.Join(b.dir, id), raftAddr: string(t.LocalAddr())}
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
	l := &inproc.Launcher{Catalog: b.cat, TimeScale: 1, Tick: o.reportEvery, ReportEvery: o.reportEvery, AllRanks: true, Logger: b.quiet}
	var setup []consensus.Command
	setup = append(setup, &consensus.InitCluster{ID: "bench", CheckpointRoot: filepath.Join(b.dir, "checkpoints")})
	for i := range o.nodes {
		name := fmt.Sprintf("n%04d", i)
		nd, err := node.Start(b.nodeSys, node.Config{Name: name, GPUs: o.gpus, ReportListen: "none", ActorName: "node-" + name,
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
		b.agents = append(b.agents, cluster.Member{Name: name, Meta: cluster.Meta{Role: cluster.RoleAgent, GPUs: o.gpus, ActorAddr: b.nodeSys.Address()}})
		setup = append(setup, &consensus.RegisterNode{Node: consensus.Node{ID: name, Addresses: []string{b.nodeSys.Address()}, GPUs: o.gpus, Health: consensus.Alive}})
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
		return errors.New("bench controlplane: no built-in application runs for hours")
	}
	now := float64(time.Now().UnixNano()) / 1e9
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range o.jobs {
		app := apps[i%len(apps)]
		id := fmt.Sprintf("job-%05d", i)
		// A cluster in its steady state: jobs submitted over the last
		// four hours (a job seconds old is never worth a restart).
		setup = append(setup, &consensus.SubmitJob{ID: id, SubmitTime: now - 4*3600*rng.Float64(),
			Spec: consensus.JobSpec{Name: id, App: app, MinReplicas: 1, MaxReplicas: 8, Limits: b.cat[app].Limits()}})
	}
	for chunk := range slices.Chunk(setup, 512) {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := leader.srv.Apply(c, chunk...)
		cancel()
		if err != nil {
			return fmt.Errorf("bench controlplane: setup: %w", err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("bench controlplane: setup: %w", r.Err)
			}
		}
	}
	b.log.Info("bench controlplane: cluster up", "nodes", o.nodes, "gpus", o.nodes*o.gpus, "jobs", o.jobs,
		"transport", map[bool]string{true: "local", false: "remote"}[o.local], "tls", b.tls != nil)
	for _, s := range b.servers {
		if err := b.startActors(s); err != nil {
			return err
		}
	}
	return nil
}

func (b *cpBench) raftConfig(id string) consensus.Config {
	cfg := consensus.DefaultConfig(raft.ServerID(id))
	cfg.Logger = b.lib
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = b.o.heartbeat, b.o.election, b.o.lease
	return cfg
}

// openRaft opens s's Raft node on t; followers forward writes over the
// Raft port, as in production.
func (b *cpBench) openRaft(s *cpServer, t *consensus.Transport) error {
	cfg := b.raftConfig(s.id)
	srv, err := consensus.OpenDisk(cfg, s.dir, t, t.Forwarder())
	if err != nil {
		_ = t.Close()
		return err
	}
	s.srv = srv
	return nil
}

func (b *cpBench) startActors(s *cpServer) error {
	if b.o.local {
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
	props, err := control.NewAllocator(control.Config{Store: s.srv, Server: s.id, Members: b.members, Interval: b.o.interval,
		MaxFailures: -1, Logger: b.quiet,
		NodePID: func(n *consensus.Node) *actor.PID { return actor.NewPID(n.Addresses[0], "node-"+n.ID) },
		HostPID: func(m cluster.Member) *actor.PID { return actor.NewPID(m.Meta.ActorAddr, "jobhost-"+m.Name) },
	}, func(ri control.RoundInfo) {
		b.mu.Lock()
		b.rounds = append(b.rounds, cpRound{server: id, info: ri})
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
func (b *cpBench) members() []cluster.Member {
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

func (b *cpBench) leader(ctx context.Context, d time.Duration) (*cpServer, error) {
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
	return nil, errors.New("bench controlplane: no leader")
}

// roundsSince returns the committed rounds observed since mark from.
func (b *cpBench) roundsSince(from int) []cpRound {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []cpRound
	for _, r := range b.rounds[from:] {
		if r.info.Committed {
			out = append(out, r)
		}
	}
	return out
}

// mark is the position of the next round observed.
func (b *cpBench) mark() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rounds)
}

// warmUp waits until (nearly) every job is placed and its actor has bid,
// then for three more rounds.
func (b *cpBench) warmUp(ctx context.Context) error {
	deadline := time.Now().Add(b.o.warmup)
	want := min(b.o.jobs, b.o.nodes*b.o.gpus) * 9 / 10
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
		if placed >= want && bids >= b.o.jobs*9/10 {
			b.log.Info("bench controlplane: warm", "placed", placed, "bids", bids)
			break
		}
		if time.Now().After(deadline) {
			b.log.Warn("bench controlplane: warm-up ended before the jobs were placed", "placed", placed, "bids", bids, "want", want)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		b.log.Info("bench controlplane: warming up", "placed", placed, "bids", bids, "reports", b.reports.Load())
	}
	settled := time.Now().Add(b.o.settle)
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
		b.log.Info("bench controlplane: settling", "gpus_used", gpusUsed(l.srv.LocalState()), "reports", b.reports.Load())
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

func gpusUsed(st *consensus.State) int {
	n := 0
	for _, g := range st.UsedGPUs() {
		n += g
	}
	return n
}

func (b *cpBench) waitRounds(ctx context.Context, from, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for len(b.roundsSince(from)) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench controlplane: %d rounds not committed within %v", n, d)
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
func (b *cpBench) timeRounds(ctx context.Context, rep *controlPlaneReport) error {
	var err error
	for range 3 {
		if err = b.timeRoundsOnce(ctx, rep); !errors.Is(err, errLeaderMoved) {
			return err
		}
		b.log.Warn("bench controlplane: timing again", "err", err)
	}
	return err
}

var errLeaderMoved = errors.New("bench controlplane: leadership moved while timing rounds")

func (b *cpBench) timeRoundsOnce(ctx context.Context, rep *controlPlaneReport) error {
	l, err := b.leader(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	// From the end of a round to the end of the R-th next one.
	m := b.mark()
	if err := b.waitRounds(ctx, m, 1, 60*time.Second); err != nil {
		return err
	}
	if b.o.cpuProfile != "" {
		f, err := os.Create(b.o.cpuProfile)
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
	if err := b.waitRounds(ctx, m, b.o.rounds, time.Duration(b.o.rounds+30)*(b.o.interval+5*time.Second)); err != nil {
		return err
	}
	idx1, rep1, off1, t1 := l.srv.LastIndex(), b.reports.Load(), b.offered.Load(), time.Now()
	rounds := b.roundsSince(m)[:b.o.rounds]
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
	rep.RoundS = medianP95{Median: stat.Quantile(0.5, stat.Empirical, ds, nil), P95: stat.Quantile(0.95, stat.Empirical, ds, nil)}
	rep.RaftWritesPerRound = float64(entries) / float64(b.o.rounds)
	rep.RaftBytesPerRound = float64(bytes) / float64(b.o.rounds)
	rep.ReportsPerS = float64(rep1-rep0) / t1.Sub(t0).Seconds()
	b.log.Info("bench controlplane: rounds timed", "rounds", len(ds), "median_s", rep.RoundS.Median, "p95_s", rep.RoundS.P95,
		"entries", entries, "by_command", fmt.Sprint(byCommand), "bytes", bytes, "reports_per_s", rep.ReportsPerS, "offered_per_s", float64(off1-off0)/t1.Sub(t0).Seconds(),
		"jobs_placed", rounds[len(rounds)-1].info.Jobs, "gpus_used", rounds[len(rounds)-1].info.GPUsUsed)
	return nil
}

func (b *cpBench) timeFailovers(ctx context.Context, rep *controlPlaneReport) error {
	var samples []float64
	for i := range b.o.failovers {
		l, err := b.leader(ctx, 10*time.Second)
		if err != nil {
			return err
		}
		m := b.mark()
		killed := time.Now()
		b.kill(l)
		var first *cpRound
		deadline := time.Now().Add(30 * time.Second)
		for first == nil {
			for _, r := range b.roundsSince(m) {
				if r.server != l.id && r.info.FirstOfTerm && r.info.Elected.After(killed) {
					first = &r
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("bench controlplane: no new leader's round within 30 s of killing %s", l.id)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		s := first.info.Began.Add(first.info.Duration).Sub(first.info.Elected).Seconds()
		samples = append(samples, s)
		b.log.Info("bench controlplane: failover", "trial", i+1, "killed", l.id, "new_leader", first.server,
			"elected_after_kill_s", first.info.Elected.Sub(killed).Seconds(), "first_round_after_election_s", s,
			"began_after_election_s", first.info.Began.Sub(first.info.Elected).Seconds(), "decided_s", first.info.Decided.Seconds(), "round_s", first.info.Duration.Seconds())
		if err := b.restart(ctx, l); err != nil {
			return err
		}
	}
	if len(samples) > 0 {
		slices.Sort(samples)
		rep.FirstRoundAfterFailoverS = medianMaxS{Median: stat.Quantile(0.5, stat.Empirical, samples, nil), Max: samples[len(samples)-1]}
	}
	return nil
}

// kill stops a server at once, as a crash would: its actors, its Raft
// node and its actor system's listener.
func (b *cpBench) kill(s *cpServer) {
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
func (b *cpBench) restart(ctx context.Context, s *cpServer) error {
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
			return fmt.Errorf("bench controlplane: %s did not catch up", s.id)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b.waitRounds(ctx, b.mark(), 2, 60*time.Second)
}

func (b *cpBench) stop() {
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
