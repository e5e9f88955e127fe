package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"

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
	"pollux/optimizer"
	"pollux/optimizer/topology"
	"pollux/testbed/builtin"
)

func init() { subcommands = append(subcommands, newServerCmd) }

type serverOpts struct {
	id, dataDir, bind, raftAddr, httpAddr, peers, logLevel, ckptRoot string
	topology, levels, policy                                         string
	crossRackRatio                                                   float64
	join                                                             []string
	gossipPort, actorPort, maxFailures                               int
	bootstrap, fast                                                  bool
	interval, nodeGrace, retain, agentLease                          time.Duration
	timeScale                                                        float64
	sec                                                              securityOpts
	scale                                                            scaleOpts
	fed                                                              federationOpts
}

// serverReady is the line `pollux server` prints on stdout once it serves.
type serverReady struct {
	ID     string `json:"id"`
	HTTP   string `json:"http"`
	Raft   string `json:"raft"`
	Gossip string `json:"gossip"`
	Actor  string `json:"actor"`
	// Federation is the federation listener's address (with
	// --federation); FederationGossip its address in the federation's
	// gossip pool (with --federation-gossip-key).
	Federation       string `json:"federation,omitempty"`
	FederationGossip string `json:"federation_gossip,omitempty"`
}

func newServerCmd() *cobra.Command {
	var o serverOpts
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one control-plane server: Raft member, gossip member, allocator and HTTP API",
		Long: "Runs one control-plane server (run 3 or 5): a Raft member of the replicated scheduler state " +
			"(data in --data-dir), a gossip member, the allocator actor (active on the Raft leader only, every " +
			"--interval), a job host running the job actors placed on it, and the HTTP JSON API on --http (every " +
			"server answers; followers forward writes to the leader over the Raft port), with the web dashboard at /ui/ " +
			"(docs/dashboard.md). Every channel runs over " +
			"mutual TLS with the certificates of --ca, --cert and --key and gossip is encrypted with --gossip-key " +
			"(docs/security.md); --insecure runs plaintext, for development. --peers lists every server as " +
			"id=raftaddr=httpaddr; --bootstrap forms the cluster from it (safe to repeat on restart) and sets the " +
			"cluster's checkpoint root (--checkpoint-root, which can never change afterwards). A server added later " +
			"starts without --bootstrap (and --peers), joins the gossip with --join, and is made a voter with " +
			"`pollux operator raft add-server`. --topology-levels names the cluster's topology levels (set at bootstrap, like " +
			"the checkpoint root), --topology where this server sits (a server warns when a majority of the voters share a rack), " +
			"--policy the allocation policy (auto: pollux on one GPU type, pollux-het on several). --cluster names the cluster (once in its life) " +
			"and --federation with --federation-addr makes it a lab of a federation that lends and borrows GPUs (docs/federation.md). " +
			"Prints one JSON line with its addresses on stdout when ready.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runServer(ctx, o, cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.id, "id", "", "server id, unique in the cluster (required)")
	f.StringVar(&o.dataDir, "data-dir", "", "directory of the Raft log and snapshots (required)")
	f.StringVar(&o.bind, "bind", "127.0.0.1", "address for the gossip and actor listeners")
	f.StringVar(&o.raftAddr, "raft", "127.0.0.1:7000", "Raft TCP address (host:port)")
	f.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "HTTP API address (host:port)")
	f.IntVar(&o.gossipPort, "gossip-port", 0, "gossip port (0: any free port)")
	f.IntVar(&o.actorPort, "actor-port", 0, "actor port (0: any free port)")
	f.StringVar(&o.peers, "peers", "", "every server as id=raftaddr=httpaddr, comma-separated (required with --bootstrap)")
	f.BoolVar(&o.bootstrap, "bootstrap", false, "form the cluster from --peers (no effect on a server with state)")
	f.StringSliceVar(&o.join, "join", nil, "gossip addresses (host:port) of members to join")
	f.BoolVar(&o.fast, "fast-gossip", false, "sub-second failure detection (loopback and test clusters)")
	f.DurationVar(&o.interval, "interval", allocator.DefaultInterval, "scheduling interval")
	f.DurationVar(&o.nodeGrace, "node-grace", 3*time.Second, "how long an agent must be missing from the membership before it is marked dead")
	f.DurationVar(&o.agentLease, "agent-lease", allocator.DefaultLease, "the agents' lease: the leader renews it every quarter of it; an agent "+
		"that goes that long without a renewal pauses its workers, and no job restarts elsewhere until its lease, plus half of it, "+
		"has surely ended (docs/control-plane.md, Fencing). At most two thirds of --node-grace")
	f.IntVar(&o.maxFailures, "max-failures", 5, "failed incarnations in a row (without finishing an epoch) after which a job is marked failed; -1: retry forever")
	f.Float64Var(&o.timeScale, "time-scale", 1, "emulated seconds per real second of the cluster's emulated workers")
	f.StringVar(&o.ckptRoot, "checkpoint-root", "", "the cluster's checkpoint root, ROOT/<job id> for jobs that name no directory: a directory "+
		"every agent reaches (shared storage). Set once when the cluster is bootstrapped; a server started later with another root "+
		"refuses to run. Without one, jobs must name their checkpoint_dir")
	f.DurationVar(&o.retain, "retain", 0, "prune finished jobs and dead nodes from the state this long after they finished (0: keep them)")
	f.StringVar(&o.topology, "topology", "", "where this server sits: level=domain pairs, innermost first, e.g. rack=r1,zone=z1 (empty: the default rack)")
	f.StringVar(&o.levels, "topology-levels", "rack", "the cluster's topology levels, innermost (rack) first, e.g. rack,zone: set once when the "+
		"cluster is bootstrapped; a server given other levels refuses to run, and agents must declare every level in this order")
	f.StringVar(&o.policy, "policy", "auto", "allocation policy: auto (pollux on one GPU type, pollux-het on several), pollux, pollux-het, sia or pollux-unaware")
	f.Float64Var(&o.crossRackRatio, "cross-rack-ratio", optimizer.DefaultCrossRackRatio, "how many times slower synchronising across racks is "+
		"than within one (>= 1), for jobs that have not measured it")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.sec.flags(f)
	o.scale.flags(f)
	o.fed.flags(f)
	return cmd
}

// hostOf is the host of a host:port address ("" if it has none).
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return h
}

// serverPeers parses --peers.
func serverPeers(s string) ([]raft.Server, map[raft.ServerID]string, error) {
	var servers []raft.Server
	httpPeers := map[raft.ServerID]string{}
	for _, p := range strings.Split(s, ",") {
		parts := strings.Split(p, "=")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return nil, nil, fmt.Errorf("server: --peers entry %q is not id=raftaddr=httpaddr", p)
		}
		id := raft.ServerID(parts[0])
		if _, dup := httpPeers[id]; dup {
			return nil, nil, fmt.Errorf("server: --peers names %q twice", id)
		}
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(parts[1])})
		httpPeers[id] = parts[2]
	}
	return servers, httpPeers, nil
}

func runServer(ctx context.Context, o serverOpts, cmd *cobra.Command) error {
	log, err := newLogger(cmd.ErrOrStderr(), o.logLevel)
	if err != nil {
		return badInput(err)
	}
	if o.id == "" || o.dataDir == "" {
		return badInput(errors.New("server: --id and --data-dir are required"))
	}
	if o.bootstrap && o.peers == "" {
		return badInput(errors.New("server: --bootstrap needs --peers"))
	}
	if !(o.timeScale > 0) || o.interval <= 0 || o.retain < 0 {
		return badInput(fmt.Errorf("server: --time-scale %v and --interval %v must be positive, --retain %v not negative", o.timeScale, o.interval, o.retain))
	}
	if err := checkLease(o.agentLease, o.nodeGrace); err != nil {
		return badInput(err)
	}
	if o.ckptRoot != "" && !filepath.IsAbs(o.ckptRoot) {
		return badInput(fmt.Errorf("server: --checkpoint-root %q is not an absolute path", o.ckptRoot))
	}
	place, err := placeMeta(o.topology, "", "")
	if err != nil {
		return badInput(fmt.Errorf("server: %w", err))
	}
	levels, err := topology.ParseLevels(o.levels)
	if err != nil {
		return badInput(fmt.Errorf("server: --topology-levels: %w", err))
	}
	levelsGiven := cmd.Flags().Changed("topology-levels")
	if _, err := cluster.CheckTopology(place.Topology, levels); err != nil && levelsGiven {
		return badInput(fmt.Errorf("server: --topology does not fit --topology-levels: %w", err))
	}
	policy, typed, err := serverPolicy(o.policy)
	if err != nil {
		return badInput(err)
	}
	if err := o.scale.check(cmd.Flags()); err != nil {
		return badInput(err)
	}
	if o.scale.provider != "" && o.policy != "auto" && o.policy != "pollux" {
		return badInput(fmt.Errorf("server: --autoscale decides with the Pollux policy, not --policy %s", o.policy))
	}
	if !(o.crossRackRatio >= 1) || math.IsInf(o.crossRackRatio, 0) {
		return badInput(fmt.Errorf("server: --cross-rack-ratio %v, want a finite ratio of at least 1", o.crossRackRatio))
	}
	fed, err := o.fed.check(o.sec.insecure)
	if err != nil {
		return badInput(err)
	}
	if fed != nil {
		// The federation channel needs a certificate naming the cluster.
		o.sec.cluster = o.fed.cluster
	}
	var servers []raft.Server
	if o.peers != "" {
		var httpPeers map[raft.ServerID]string
		var err error
		if servers, httpPeers, err = serverPeers(o.peers); err != nil {
			return badInput(err)
		}
		if _, ok := httpPeers[raft.ServerID(o.id)]; !ok {
			return badInput(fmt.Errorf("server: --peers does not list this server %q", o.id))
		}
	}
	catalog, err := builtin.Catalog()
	if err != nil {
		return err
	}
	log = log.With("server", o.id)
	libLog := log
	if o.logLevel != "debug" {
		libLog, _ = newLogger(cmd.ErrOrStderr(), "warn")
		libLog = libLog.With("server", o.id)
	}
	sec, err := o.sec.load(pki.RoleServer, o.id, []string{o.bind, hostOf(o.raftAddr), hostOf(o.httpAddr)}, log)
	if err != nil {
		return err
	}
	raftTLS, err := sec.raftTLS()
	if err != nil {
		return err
	}
	remoteOpts, err := sec.remoteOptions(libLog.With("lib", "protoactor"))
	if err != nil {
		return err
	}

	ccfg := consensus.DefaultConfig(raft.ServerID(o.id))
	ccfg.Logger = libLog.With("lib", "consensus")
	trans, err := consensus.ListenTCP(o.raftAddr, ccfg, raftTLS)
	if err != nil {
		return err
	}
	// Forwarded writes go to the leader's Raft port, at the address Raft
	// itself knows: a server added later is reached as soon as it leads.
	srv, err := consensus.OpenDisk(ccfg, filepath.Join(o.dataDir, "raft"), trans, trans.Forwarder())
	if err != nil {
		_ = trans.Close()
		return err
	}
	defer srv.Shutdown()
	if o.bootstrap {
		if err := srv.Bootstrap(servers); err != nil {
			return err
		}
	}

	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return libLog.With("lib", "protoactor")
	}))
	rem := remote.NewRemote(sys, remote.Configure(o.bind, o.actorPort, remoteOpts...))
	rem.Start()
	defer rem.Shutdown(false)

	var members, wan *cluster.Membership
	var link *fedlink.Link
	fedAddr, wanAddr := "", ""
	if fed != nil {
		var stopFed func()
		link, fedAddr, stopFed, err = serveFederation(ctx, o.fed, fed, sec.creds, srv, sys, &members, &wan, log)
		if err != nil {
			return err
		}
		defer stopFed()
		if o.fed.gossipKey != "" {
			if wan, err = joinFederationGossip(ctx, o.fed, o.id, o.bind, fedAddr, fed, sec.gossipKeys, log, libLog.With("lib", "memberlist-wan")); err != nil {
				return err
			}
			defer wan.Shutdown()
			defer wan.Leave(time.Second)
			wanAddr = wan.Addr()
		}
	}
	members, err = cluster.Start(cluster.Config{
		Name: o.id, BindAddr: o.bind, BindPort: o.gossipPort, Fast: o.fast, Logger: libLog.With("lib", "memberlist"),
		Keys: sec.gossipKeys,
		Meta: cluster.Meta{Role: cluster.RoleServer, Rack: place.Rack, Topology: place.Topology, ActorAddr: sys.Address(),
			RaftAddr: string(trans.LocalAddr()), HTTPAddr: o.httpAddr, FederationAddr: fedAddr},
	})
	if err != nil {
		return err
	}
	defer members.Shutdown()
	defer members.Leave(time.Second)
	go drainEvents(members, log)
	sec.reloadGossipKeys(ctx, members, log)

	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var initLevels []string
	if levelsGiven {
		initLevels = levels
	}
	if o.bootstrap || o.ckptRoot != "" {
		go initCluster(ctx, srv, o.ckptRoot, initLevels, log, fail)
	}
	go watchLevels(ctx, srv, members, initLevels, log, fail)
	if o.fed.cluster != "" {
		go setLab(ctx, srv, labOf(o.fed, fed, sec.creds), log, fail)
	}

	scale, err := o.scale.build(scaleEnv{dataDir: o.dataDir, gossip: members.Addr(), ca: o.sec.ca, gossipKey: o.sec.gossipKey,
		insecure: o.sec.insecure, fast: o.fast, timeScale: o.timeScale, logger: log})
	if err != nil {
		return err
	}
	stats := &allocator.Stats{}
	var fedPeers func() []fedlink.PeerStatus
	if link != nil {
		fedPeers = link.Peers
	}
	httpAPI := api.New(o.id, api.Config{Backend: srv, Apps: catalog.Names(), Members: members.Members, Stats: stats,
		Insecure: o.sec.insecure, Autoscaling: o.scale.provider != "", NodeCost: o.scale.cost, Logger: log, FederationPeers: fedPeers})
	dash, err := dashboard.New(dashboard.Config{ID: o.id, Backend: srv, API: httpAPI, Members: members.Members,
		LastContact: srv.Raft().LastContact, Autoscaling: o.scale.provider != "", NodeCost: o.scale.cost, Logger: log})
	if err != nil {
		return err
	}
	go dash.Run(ctx)
	hprops, err := job.NewHost(job.HostConfig{Server: o.id, Store: srv, Logger: log})
	if err != nil {
		return err
	}
	host, err := sys.Root.SpawnNamed(hprops, pb.JobHostActor)
	if err != nil {
		return fmt.Errorf("server: spawning job host: %w", err)
	}
	defer func() { _ = sys.Root.StopFuture(host).Wait() }()
	props, err := allocator.NewAllocator(allocator.Config{
		Store: srv, Server: o.id, Members: members.Members, Interval: o.interval, CheckpointRoot: o.ckptRoot,
		Policy: policy, TypedPolicy: typed, CrossRackRatio: o.crossRackRatio, Levels: state.NormalizeLevels(initLevels),
		Retain: o.retain, TimeScale: o.timeScale, NodeGrace: o.nodeGrace, MaxFailures: o.maxFailures, Stats: stats, Logger: log,
		Lease: o.agentLease, Autoscale: scale, Federation: link, Context: ctx,
	}, func(ri allocator.RoundInfo) { httpAPI.ObserveRound(ri); dash.ObserveRound(ri) })
	if err != nil {
		return err
	}
	alloc, err := sys.Root.SpawnNamed(props, pb.AllocatorActor)
	if err != nil {
		return fmt.Errorf("server: spawning allocator: %w", err)
	}
	defer func() { _ = sys.Root.StopFuture(alloc).Wait() }()

	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("server: HTTP listener: %w", err)
	}
	if ln, err = sec.listen(ln, pki.ChannelAPI, log); err != nil {
		return err
	}
	hs := newHTTPServer(dash.Handler(httpAPI), log)
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	ready, _ := json.Marshal(serverReady{ID: o.id, HTTP: ln.Addr().String(), Raft: string(trans.LocalAddr()), Gossip: members.Addr(), Actor: sys.Address(),
		Federation: fedAddr, FederationGossip: wanAddr})
	fmt.Fprintln(cmd.OutOrStdout(), string(ready))
	log.Info("server: ready", "http", ln.Addr().String(), "raft", string(trans.LocalAddr()), "gossip", members.Addr(),
		"topology", place.Topology, "policy", o.policy)
	go warnRackMajority(ctx, srv, members, 30*time.Second, log)
	if len(o.join) > 0 {
		if err := joinUntil(ctx, members, o.join, log); err != nil {
			return nil
		}
		go members.KeepJoined(ctx, o.join, time.Second)
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("server: stopping", "err", err)
		return err
	}
	log.Info("server: stopping")
	return nil
}

// initCluster sets the cluster's configuration (a random cluster id and
// report key, the checkpoint root, the topology levels) once a leader can
// take it; if the cluster already has another checkpoint root or other
// levels it stops the server (fail): they are the cluster's, set at
// bootstrap, and jobs' checkpoints are under the root.
func initCluster(ctx context.Context, srv *consensus.Server, root string, levels []string, log *slog.Logger, fail context.CancelCauseFunc) {
	init := state.NewInitCluster(root, levels...)
	for {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := srv.InitCluster(c, init)
		cancel()
		switch {
		case err == nil:
			cfg := srv.LocalState().Config
			log.Info("server: cluster configuration", "cluster", cfg.ID, "checkpoint_root", root)
			return
		case errors.Is(err, state.ErrClusterConfig):
			fail(badInput(fmt.Errorf("server: --checkpoint-root %q, --topology-levels %q: %w", root, strings.Join(levels, ","), err)))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkLease refuses an agent lease that leaves no margin under the node
// grace: the leader restarts a dead agent's jobs only once the agent's
// lease plus its margin has ended, so a longer lease would hold every
// re-placement beyond --node-grace.
func checkLease(lease, grace time.Duration) error {
	if lease < 4*time.Millisecond || lease > 10*time.Minute {
		return fmt.Errorf("server: --agent-lease %v outside [4ms, 10m]", lease)
	}
	if wait := lease + allocator.LeaseMargin(lease); wait > grace {
		return fmt.Errorf("server: --agent-lease %v leaves no margin under --node-grace %v: a dead agent's jobs would wait "+
			"for its lease and margin (%v) rather than for --node-grace; use a lease of at most %v or a longer --node-grace",
			lease, grace, wait, grace*2/3)
	}
	return nil
}
