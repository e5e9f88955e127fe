package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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

	"pollux/actors/api"
	"pollux/actors/control"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/testbed/builtin"
)

func init() { subcommands = append(subcommands, newServerCmd) }

type serverOpts struct {
	id, dataDir, bind, raftAddr, httpAddr, peers, logLevel, ckptRoot string
	join                                                             []string
	gossipPort, actorPort, maxFailures                               int
	bootstrap, fast                                                  bool
	interval, nodeGrace                                              time.Duration
	timeScale                                                        float64
	sec                                                              securityOpts
}

// serverReady is the line `pollux server` prints on stdout once it serves.
type serverReady struct {
	ID     string `json:"id"`
	HTTP   string `json:"http"`
	Raft   string `json:"raft"`
	Gossip string `json:"gossip"`
	Actor  string `json:"actor"`
}

func newServerCmd() *cobra.Command {
	var o serverOpts
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run one control-plane server: Raft member, gossip member, allocator and HTTP API",
		Long: "Runs one control-plane server (run 3 or 5): a Raft member of the replicated scheduler state " +
			"(data in --data-dir), a gossip member, the allocator actor (active on the Raft leader only, every " +
			"--interval) with its job actors, and the HTTP JSON API on --http (every server answers; followers " +
			"forward writes to the leader over the Raft port). Every channel runs over mutual TLS with the " +
			"certificates of --ca, --cert and --key and gossip is encrypted with --gossip-key (docs/security.md); " +
			"--insecure runs plaintext, for development. --peers lists every server as id=raftaddr=httpaddr; --bootstrap forms the cluster " +
			"from it (safe to repeat on restart). Prints one JSON line with its addresses on stdout when ready.",
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
	f.StringVar(&o.peers, "peers", "", "every server as id=raftaddr=httpaddr, comma-separated (required)")
	f.BoolVar(&o.bootstrap, "bootstrap", false, "form the cluster from --peers (no effect on a server with state)")
	f.StringSliceVar(&o.join, "join", nil, "gossip addresses (host:port) of members to join")
	f.BoolVar(&o.fast, "fast-gossip", false, "sub-second failure detection (loopback and test clusters)")
	f.DurationVar(&o.interval, "interval", control.DefaultInterval, "scheduling interval")
	f.DurationVar(&o.nodeGrace, "node-grace", 3*time.Second, "how long an agent must be missing from the membership before it is marked dead")
	f.IntVar(&o.maxFailures, "max-failures", 5, "failed incarnations in a row (without finishing an epoch) after which a job is marked failed; -1: retry forever")
	f.Float64Var(&o.timeScale, "time-scale", 1, "emulated seconds per real second of the cluster's emulated workers")
	f.StringVar(&o.ckptRoot, "checkpoint-root", "", "checkpoint root of jobs that name no directory (default DATA-DIR/checkpoints)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.sec.flags(f)
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
	if o.id == "" || o.dataDir == "" || o.peers == "" {
		return badInput(errors.New("server: --id, --data-dir and --peers are required"))
	}
	if !(o.timeScale > 0) || o.interval <= 0 {
		return badInput(fmt.Errorf("server: --time-scale %v and --interval %v must be positive", o.timeScale, o.interval))
	}
	servers, peers, err := serverPeers(o.peers)
	if err != nil {
		return badInput(err)
	}
	if _, ok := peers[raft.ServerID(o.id)]; !ok {
		return badInput(fmt.Errorf("server: --peers does not list this server %q", o.id))
	}
	if o.ckptRoot == "" {
		o.ckptRoot = filepath.Join(o.dataDir, "checkpoints")
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

	members, err := cluster.Start(cluster.Config{
		Name: o.id, BindAddr: o.bind, BindPort: o.gossipPort, Fast: o.fast, Logger: libLog.With("lib", "memberlist"),
		Keys: sec.gossipKeys,
		Meta: cluster.Meta{Role: cluster.RoleServer, ActorAddr: sys.Address(), RaftAddr: string(trans.LocalAddr()), HTTPAddr: o.httpAddr},
	})
	if err != nil {
		return err
	}
	defer members.Shutdown()
	defer members.Leave(time.Second)
	go drainEvents(members, log)
	sec.reloadGossipKeys(ctx, members, log)

	httpAPI := api.New(o.id, api.Config{Backend: srv, Apps: catalog.Names(), Logger: log})
	props, err := control.NewAllocator(control.Config{
		Store: srv, Members: members.Members, Interval: o.interval, CheckpointRoot: o.ckptRoot,
		TimeScale: o.timeScale, NodeGrace: o.nodeGrace, MaxFailures: o.maxFailures, Logger: log,
	}, httpAPI.ObserveRound)
	if err != nil {
		return err
	}
	alloc, err := sys.Root.SpawnNamed(props, control.AllocatorName)
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
	hs := newHTTPServer(httpAPI, log)
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	ready, _ := json.Marshal(serverReady{ID: o.id, HTTP: ln.Addr().String(), Raft: string(trans.LocalAddr()), Gossip: members.Addr(), Actor: sys.Address()})
	fmt.Fprintln(cmd.OutOrStdout(), string(ready))
	log.Info("server: ready", "http", ln.Addr().String(), "raft", string(trans.LocalAddr()), "gossip", members.Addr())
	if len(o.join) > 0 {
		if err := joinUntil(ctx, members, o.join, log); err != nil {
			return nil
		}
		go members.KeepJoined(ctx, o.join, time.Second)
	}
	<-ctx.Done()
	log.Info("server: stopping")
	return nil
}
