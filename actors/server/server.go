package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"pollux/actors/allocator"
	"pollux/actors/fedlink"
	"pollux/actors/job"
	"pollux/actors/pb"
	"pollux/actors/server/api"
	"pollux/actors/server/dashboard"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/member"
	"pollux/internal/secure"
)

// Run runs a server until ctx ends (nil: a clean stop) or the server
// fails. Errors of a bad Config, including those found once running (a
// checkpoint root, levels or name other than the cluster's), are marked
// by usage.Wrap.
func Run(ctx context.Context, cfg Config) error {
	c, err := cfg.check()
	if err != nil {
		return err
	}
	s := &server{cfg: cfg, place: c.place, fed: c.fed, log: cfg.Logger, lib: cfg.LibLogger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.lib == nil {
		s.lib = s.log
	}
	s.log, s.lib = s.log.With("server", cfg.ID), s.lib.With("server", cfg.ID)
	defer s.close()
	return s.run(ctx)
}

// server is a running server: its parts, and what stops them.
type server struct {
	cfg        Config
	place      cluster.Meta
	fed        *fedlink.Federation
	log, lib   *slog.Logger
	sec        *secure.Security
	raftTLS    *consensus.TLS
	remoteOpts []remote.ConfigOption
	trans      *consensus.Transport
	srv        *consensus.Server
	sys        *actor.ActorSystem
	// members and wan are the lab's gossip and the federation's (nil
	// before they start); the federation link reads them meanwhile.
	members, wan     atomic.Pointer[cluster.Membership]
	link             *fedlink.Link
	fedAddr, wanAddr string
	closers          []func()
}

// onClose adds f to what close runs, last added first.
func (s *server) onClose(f func()) { s.closers = append(s.closers, f) }

func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// run starts the parts in order and waits for the end.
func (s *server) run(ctx context.Context) error {
	if err := s.loadSecurity(); err != nil {
		return err
	}
	if err := s.openRaft(); err != nil {
		return err
	}
	tctx, stopTracking := context.WithCancel(ctx)
	s.onClose(stopTracking)
	s.trackMembers(tctx)
	s.startRemote()
	if err := s.startFederation(ctx); err != nil {
		return err
	}
	if err := s.startGossip(ctx); err != nil {
		return err
	}
	ctx, fail := context.WithCancelCause(ctx)
	s.onClose(func() { fail(nil) })
	s.startLoops(ctx, fail)
	handler, err := s.startServices(ctx)
	if err != nil {
		return err
	}
	httpAddr, err := s.serveHTTP(handler)
	if err != nil {
		return err
	}
	s.ready(httpAddr)
	go warnRackMajority(ctx, s.srv, s.members.Load(), 30*time.Second, s.log)
	if len(s.cfg.Join) > 0 {
		if err := member.JoinUntil(ctx, s.members.Load(), s.cfg.Join, s.log); err != nil {
			return nil
		}
		go s.members.Load().KeepJoined(ctx, s.cfg.Join, time.Second)
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		s.log.Error("server: stopping", "err", err)
		return err
	}
	s.log.Info("server: stopping")
	return nil
}

// loadSecurity loads the certificates and keys and makes the Raft and
// actor transports' TLS from them.
func (s *server) loadSecurity() error {
	opts := s.cfg.Security
	if s.fed != nil {
		// The federation channel needs a certificate naming the cluster.
		opts.Cluster = s.cfg.Federation.Cluster
	}
	var err error
	s.sec, err = opts.Load(pki.RoleServer, s.cfg.ID, []string{s.cfg.Bind, hostOf(s.cfg.RaftAddr), hostOf(s.cfg.HTTPAddr)}, s.log)
	if err != nil {
		return err
	}
	if s.raftTLS, err = raftTLS(s.sec.Creds); err != nil {
		return err
	}
	if s.raftTLS != nil {
		s.raftTLS.Gate = s.sec.Gate(pki.ChannelRaft, s.lib.With("lib", "consensus"), nil)
	}
	actorLog := s.lib.With("lib", "protoactor")
	s.remoteOpts, err = secure.RemoteOptions(s.sec.Creds, s.sec.Gate(pki.ChannelActor, actorLog, nil), actorLog)
	return err
}

// trackMembers keeps the gates' members the addresses of the servers in
// Raft's configuration, of the lab's gossip members (and the addresses
// they advertise) and of this machine, refreshed every second.
func (s *server) trackMembers(ctx context.Context) {
	s.sec.TrackMembers(ctx, time.Second, func() []string {
		var out []string
		if f := s.srv.Raft().GetConfiguration(); f.Error() == nil {
			for _, sv := range f.Configuration().Servers {
				out = append(out, string(sv.Address))
			}
		}
		return out
	}, func() []string {
		members := s.members.Load()
		if members == nil {
			return nil
		}
		var out []string
		for _, m := range members.Members() {
			out = append(out, m.Addr, m.Meta.ActorAddr, m.Meta.RaftAddr, m.Meta.HTTPAddr)
		}
		return out
	})
}

// raftTLS is the Raft port's TLS of a server holding creds (nil when
// insecure).
func raftTLS(creds *pki.Credentials) (*consensus.TLS, error) {
	if creds == nil {
		return nil, nil
	}
	srv, err1 := creds.ServerConfig(pki.ChannelRaft)
	cli, err2 := creds.ClientConfig(pki.ChannelRaft)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &consensus.TLS{Server: srv, Client: cli}, nil
}

// openRaft opens the Raft member on its port and data directory, and
// bootstraps the cluster if asked.
func (s *server) openRaft() error {
	if err := secure.PrivateDir(s.cfg.DataDir, s.log); err != nil {
		return err
	}
	ccfg := consensus.DefaultConfig(raft.ServerID(s.cfg.ID))
	ccfg.Logger = s.lib.With("lib", "consensus")
	if d := s.cfg.RaftElection; d > 0 {
		ccfg.HeartbeatTimeout, ccfg.ElectionTimeout, ccfg.LeaderLeaseTimeout = d, d, d/2
	}
	trans, err := consensus.ListenTCP(s.cfg.RaftAddr, ccfg, s.raftTLS)
	if err != nil {
		return err
	}
	// Forwarded writes go to the leader's Raft port, at the address Raft
	// itself knows: a server added later is reached as soon as it leads.
	srv, err := consensus.OpenDisk(ccfg, filepath.Join(s.cfg.DataDir, "raft"), trans, trans.Forwarder())
	if err != nil {
		_ = trans.Close()
		return err
	}
	s.trans, s.srv = trans, srv
	s.onClose(func() { _ = srv.Shutdown() })
	if !s.cfg.Bootstrap {
		return nil
	}
	var servers []raft.Server
	for _, p := range s.cfg.Peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	return srv.Bootstrap(servers)
}

// startRemote starts the actor system and its remote listener.
func (s *server) startRemote() {
	s.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return s.lib.With("lib", "protoactor")
	}))
	rem := remote.NewRemote(s.sys, remote.Configure(s.cfg.Bind, s.cfg.ActorPort, s.remoteOpts...))
	rem.Start()
	s.onClose(func() { rem.Shutdown(false) })
}

// startGossip starts the server's member of the lab's gossip.
func (s *server) startGossip(ctx context.Context) error {
	members, err := cluster.Start(cluster.Config{
		Name: s.cfg.ID, BindAddr: s.cfg.Bind, BindPort: s.cfg.GossipPort, Fast: s.cfg.FastGossip, Logger: s.lib.With("lib", "memberlist"),
		Keys: s.sec.GossipKeys,
		Meta: cluster.Meta{Role: cluster.RoleServer, Rack: s.place.Rack, Topology: s.place.Topology, ActorAddr: s.sys.Address(),
			RaftAddr: string(s.trans.LocalAddr()), HTTPAddr: s.cfg.HTTPAddr, FederationAddr: s.fedAddr},
	})
	if err != nil {
		return err
	}
	s.members.Store(members)
	s.onClose(func() { _ = members.Leave(time.Second); _ = members.Shutdown() })
	go member.LogEvents(members, s.log)
	s.sec.ReloadOnHangup(ctx, members, s.log)
	return nil
}

// startLoops starts the control-plane loops that set and check the
// cluster's configuration; a mismatch stops the server through fail.
func (s *server) startLoops(ctx context.Context, fail context.CancelCauseFunc) {
	if s.cfg.Bootstrap || s.cfg.CheckpointRoot != "" {
		go initCluster(ctx, s.srv, s.cfg.CheckpointRoot, s.cfg.Levels, s.log, fail)
	}
	go watchLevels(ctx, s.srv, s.members.Load(), s.cfg.Levels, s.log, fail)
	if s.cfg.Federation.Cluster != "" {
		go setLab(ctx, s.srv, labOf(s.cfg.Federation, s.fed, s.sec.Creds), s.log, fail)
	}
}

// startServices starts the API, the dashboard, the job host and the
// allocator, and returns the HTTP handler of the API and dashboard.
func (s *server) startServices(ctx context.Context) (http.Handler, error) {
	members := s.members.Load()
	scale, err := s.cfg.Autoscale.build(scaleEnv{dataDir: s.cfg.DataDir, gossip: members.Addr(), ca: s.cfg.Security.CA,
		gossipKey: s.cfg.Security.GossipKey, insecure: s.cfg.Security.Insecure, fast: s.cfg.FastGossip, timeScale: s.cfg.TimeScale, logger: s.log})
	if err != nil {
		return nil, err
	}
	stats := &allocator.Stats{}
	var fedPeers func() []fedlink.PeerStatus
	if s.link != nil {
		fedPeers = s.link.Peers
	}
	autoscaling, cost := s.cfg.Autoscale.Provider != "", s.cfg.Autoscale.NodeCost
	httpAPI := api.New(s.cfg.ID, api.Config{Backend: s.srv, Apps: s.cfg.Apps, AppLimits: s.cfg.AppLimits, Members: members.Members, Stats: stats,
		Insecure: s.cfg.Security.Insecure, Autoscaling: autoscaling, NodeCost: cost, Logger: s.log, FederationPeers: fedPeers,
		Interval: s.cfg.Interval, Collectors: []prometheus.Collector{s.sec.Collector()}, Logs: s.fetchLog})
	dash, err := dashboard.New(dashboard.Config{ID: s.cfg.ID, Backend: s.srv, API: httpAPI, Members: members.Members,
		LastContact: s.srv.Raft().LastContact, Autoscaling: autoscaling, NodeCost: cost, Logger: s.log})
	if err != nil {
		return nil, err
	}
	go dash.Run(ctx)
	observe := func(ri allocator.RoundInfo) { httpAPI.ObserveRound(ri); dash.ObserveRound(ri) }
	if err := s.spawnActors(ctx, scale, stats, observe); err != nil {
		return nil, err
	}
	return dash.Handler(httpAPI), nil
}

// fetchLog asks the logs actor of the agent at addr (over the actor
// channel's mutual TLS) for part of a worker's log.
func (s *server) fetchLog(ctx context.Context, addr string, req *pb.LogRead) (*pb.LogChunk, error) {
	timeout := fetchLogTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	res, err := s.sys.Root.RequestFuture(actor.NewPID(addr, pb.LogsActor), req, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("server: the agent at %s: %w", addr, err)
	}
	c, ok := res.(*pb.LogChunk)
	if !ok {
		return nil, fmt.Errorf("server: the agent at %s answered %T", addr, res)
	}
	return c, nil
}

// fetchLogTimeout bounds a fetchLog without a deadline.
const fetchLogTimeout = 5 * time.Second

// spawnActors spawns the job host and the allocator.
func (s *server) spawnActors(ctx context.Context, scale *allocator.Autoscale, stats *allocator.Stats, observe allocator.Observer) error {
	hprops, err := job.NewHost(job.HostConfig{Server: s.cfg.ID, Store: s.srv, Logger: s.log})
	if err != nil {
		return err
	}
	host, err := s.sys.Root.SpawnNamed(hprops, pb.JobHostActor)
	if err != nil {
		return fmt.Errorf("server: spawning job host: %w", err)
	}
	s.onClose(func() { _ = s.sys.Root.StopFuture(host).Wait() })
	c := s.cfg
	props, err := allocator.NewAllocator(allocator.Config{
		Store: s.srv, Server: c.ID, Members: s.members.Load().Members, Interval: c.Interval, CheckpointRoot: c.CheckpointRoot,
		Policy: c.Policy, TypedPolicy: c.TypedPolicy, Levels: state.NormalizeLevels(c.Levels),
		Retain: c.Retain, TimeScale: c.TimeScale, NodeGrace: c.NodeGrace, MaxFailures: c.MaxFailures, Stats: stats, Logger: s.log,
		Lease: c.AgentLease, Autoscale: scale, Federation: s.link, Context: ctx,
	}, observe)
	if err != nil {
		return err
	}
	alloc, err := s.sys.Root.SpawnNamed(props, pb.AllocatorActor)
	if err != nil {
		return fmt.Errorf("server: spawning allocator: %w", err)
	}
	s.onClose(func() { _ = s.sys.Root.StopFuture(alloc).Wait() })
	return nil
}

// serveHTTP serves handler on the HTTP address (TLS unless insecure) and
// returns the address it listens on.
func (s *server) serveHTTP(handler http.Handler) (string, error) {
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return "", fmt.Errorf("server: HTTP listener: %w", err)
	}
	if ln, err = s.sec.Listen(ln, pki.ChannelAPI, s.log); err != nil {
		return "", err
	}
	hs := newHTTPServer(handler, s.log)
	go func() { _ = hs.Serve(ln) }()
	s.onClose(func() { _ = hs.Close() })
	return ln.Addr().String(), nil
}

// ready tells the server's addresses (OnReady) and logs that it serves.
func (s *server) ready(httpAddr string) {
	members, raftAddr := s.members.Load(), string(s.trans.LocalAddr())
	if s.cfg.OnReady != nil {
		s.cfg.OnReady(Ready{ID: s.cfg.ID, HTTP: httpAddr, Raft: raftAddr, Gossip: members.Addr(), Actor: s.sys.Address(),
			Federation: s.fedAddr, FederationGossip: s.wanAddr})
	}
	s.log.Info("server: ready", "http", httpAddr, "raft", raftAddr, "gossip", members.Addr(),
		"topology", s.place.Topology, "policy", s.cfg.PolicyName)
}

// HTTP server limits.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 30 * time.Second
	httpWriteTimeout      = 60 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 64 << 10
)

// newHTTPServer is an HTTP server with timeouts and header limits, whose
// own errors go to log.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout, MaxHeaderBytes: httpMaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}
