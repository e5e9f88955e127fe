package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/hashicorp/raft"

	"pollux/actors/allocator"
	"pollux/actors/job"
	"pollux/actors/node"
	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
)

// nodeHost is one agent as the bench runs it in its process: with the
// remote transport, an actor system of its own with its own listener
// (mutual TLS with its own certificate unless Insecure), its node actor,
// and its own gossip member.
type nodeHost struct {
	name   string
	addr   string             // its actor system's advertised address
	sys    *actor.ActorSystem // nil: in the node process
	rem    *remote.Remote     // nil: the local transport
	nd     *node.Node
	gossip *cluster.Membership
}

// server is one in-process server: Raft, its actor system (its own
// listener with the remote transport), allocator, job host and gossip
// member.
type server struct {
	id, dir, raftAddr string
	gossipPort        int
	srv               *consensus.Server
	sys               *actor.ActorSystem
	rem               *remote.Remote
	gossip            *cluster.Membership
	alloc, host       *actor.PID
	down              bool
}

// actorName is the name of a spawned actor: the production name with
// the remote transport, where every process has an actor system of its
// own; suffixed with the owner's name with the local one, where they
// share one.
func (b *bench) actorName(base, owner string) string {
	if b.o.Local {
		return base + "-" + owner
	}
	return base
}

// localAddr is the actor address the members of the local transport
// advertise in their gossip metadata (which needs a host and a port):
// they have no listener, and the allocator addresses their actors in
// the shared actor system.
const localAddr = "127.0.0.1:1"

// actorAddr is the address an actor system's members advertise.
func (b *bench) actorAddr(sys *actor.ActorSystem) string {
	if b.o.Local {
		return localAddr
	}
	return sys.Address()
}

// credentials are identity name's (nil with Insecure).
func (b *bench) credentials(name string) (*pki.Credentials, error) {
	if b.creds != nil {
		return b.creds(name)
	}
	if b.tls == nil {
		return nil, nil
	}
	return b.tls.Credentials(name)
}

// newSystem starts an actor system with remote, as identity name: its
// own listener on 127.0.0.1 (any free port), secured with name's
// certificate unless Insecure. With the local transport it is the one
// shared system.
func (b *bench) newSystem(name string) (*actor.ActorSystem, *remote.Remote, error) {
	if b.o.Local {
		return b.shared, nil, nil
	}
	creds, err := b.credentials(name)
	if err != nil {
		return nil, nil, err
	}
	opts, err := b.o.RemoteOptions(creds, b.lib)
	if err != nil {
		return nil, nil, err
	}
	for try := 1; ; try++ {
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return b.lib }))
		rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, opts...))
		err := startRemote(rem)
		if err == nil || try == 3 {
			return sys, rem, err
		}
		b.log.Warn("controlplane: starting an actor system again", "name", name, "err", err)
	}
}

// startRemote starts rem. protoactor panics when its endpoint manager
// has not started within 3 s (a loaded machine starting hundreds of
// actor systems): that is returned as an error (the listener it opened
// stays open until the process ends).
func startRemote(rem *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("controlplane: starting an actor system's listener: %v", p)
		}
	}()
	rem.Start()
	return nil
}

// startGossip starts a gossip member of the bench's pool (the crowded
// profile: `pollux server` and `pollux agent` use the LAN one, but here
// hundreds of members share the process's cores; encrypted with the
// run's key unless Insecure), on port (0: any), advertising meta, and
// joins seeds (none: the first member), trying again until ctx is done
// (a node process whose servers are gone stops). Its events are
// drained: the bench reads the view.
func (b *bench) startGossip(ctx context.Context, name string, port int, meta cluster.Meta, seeds []string) (*cluster.Membership, error) {
	m, err := cluster.Start(cluster.Config{Name: name, BindPort: port, Meta: meta, Keys: b.gossipKeys, Crowded: true, Logger: b.lib})
	if err != nil {
		return nil, err
	}
	go func() {
		for range m.Events() {
		}
	}()
	if len(seeds) == 0 {
		return m, nil
	}
	var jerr error
	for range 20 {
		if _, jerr = m.Join(seeds); jerr == nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			_ = m.Shutdown()
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	_ = m.Shutdown()
	return nil, fmt.Errorf("controlplane: %s joining the gossip: %w", name, jerr)
}

// startNode starts node name: its actor system (with the remote transport),
// its node actor of emulated in-process workers, and its gossip member
// joined to the servers'.
func (b *bench) startNode(ctx context.Context, name string, seeds []string) (*nodeHost, error) {
	sys, rem, err := b.newSystem(name)
	if err != nil {
		return nil, err
	}
	h := &nodeHost{name: name, addr: b.actorAddr(sys), sys: sys, rem: rem}
	h.nd, err = node.Start(sys, node.Config{Name: name, GPUs: b.o.GPUs, ReportListen: "none", ActorName: b.actorName(pb.NodeActor, name),
		Launch: func(s node.WorkerSpec) (node.Worker, error) {
			deliver := s.Report
			s.Report = func(r workerproto.Report) { b.offered.Add(1); deliver(r) }
			return b.launcher.Launch(s)
		}, Emulator: func(app string) []string { return []string{"inproc", app} }, Grace: 5 * time.Second,
		WorkerOutput: io.Discard, Logger: slog.New(lapseCounter{next: b.quiet.Handler(), n: &b.lapses})})
	if err != nil {
		h.stop()
		return nil, err
	}
	meta := cluster.Meta{Role: cluster.RoleAgent, GPUs: b.o.GPUs, ActorAddr: b.actorAddr(sys)}
	if h.gossip, err = b.startGossip(ctx, name, 0, meta, seeds); err != nil {
		h.stop()
		return nil, err
	}
	return h, nil
}

// stop stops the node's workers, gossip member and listener.
func (h *nodeHost) stop() {
	if h.nd != nil {
		_ = h.nd.Stop(10 * time.Second)
	}
	if h.gossip != nil {
		_ = h.gossip.Shutdown()
	}
	if h.rem != nil {
		h.rem.Shutdown(false)
	}
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

func (b *bench) raftConfig(id string) consensus.Config {
	cfg := consensus.DefaultConfig(raft.ServerID(id))
	cfg.Logger = b.lib
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = b.o.Heartbeat, b.o.Election, b.o.Lease
	return cfg
}

// openRaft opens s's Raft node on t; followers forward writes over the
// Raft port, as in production.
func (b *bench) openRaft(s *server, t *consensus.Transport) error {
	srv, err := consensus.OpenDisk(b.raftConfig(s.id), s.dir, t, t.Forwarder())
	if err != nil {
		_ = t.Close()
		return err
	}
	s.srv = srv
	return nil
}

// startMember starts s's actor system and its gossip member (on its
// gossip port, the same after a restart), joined to the other servers.
func (b *bench) startMember(s *server) error {
	var err error
	if s.sys, s.rem, err = b.newSystem(s.id); err != nil {
		return err
	}
	var seeds []string
	for _, o := range b.servers {
		if o != s && o.gossip != nil && !o.down {
			seeds = append(seeds, o.gossip.Addr())
		}
	}
	meta := cluster.Meta{Role: cluster.RoleServer, ActorAddr: b.actorAddr(s.sys), RaftAddr: s.raftAddr}
	if s.gossip, err = b.startGossip(context.Background(), s.id, s.gossipPort, meta, seeds); err != nil {
		return err
	}
	if s.gossipPort == 0 {
		_, port, _ := net.SplitHostPort(s.gossip.Addr())
		s.gossipPort, _ = strconv.Atoi(port)
	}
	return nil
}

// startActors starts s's job host and allocator; the allocator learns
// the members from s's gossip.
func (b *bench) startActors(s *server) error {
	hprops, err := job.NewHost(job.HostConfig{Server: s.id, Store: s.srv, Reports: &b.reports, Logger: b.quiet})
	if err != nil {
		return err
	}
	if s.host, err = s.sys.Root.SpawnNamed(hprops, b.actorName(pb.JobHostActor, s.id)); err != nil {
		return err
	}
	id := s.id
	cfg := allocator.Config{Store: s.srv, Server: s.id, Members: s.gossip.Members, Interval: b.o.Interval, MaxFailures: -1, Lease: b.o.AgentLease, Logger: b.quiet}
	if b.o.Local {
		cfg.NodePID = func(n *state.Node) *actor.PID {
			return actor.NewPID(b.shared.Address(), b.actorName(pb.NodeActor, n.ID))
		}
		cfg.HostPID = func(m cluster.Member) *actor.PID {
			return actor.NewPID(b.shared.Address(), b.actorName(pb.JobHostActor, m.Name))
		}
	}
	props, err := allocator.NewAllocator(cfg, func(ri allocator.RoundInfo) {
		b.mu.Lock()
		b.rounds = append(b.rounds, round{server: id, info: ri})
		b.mu.Unlock()
	})
	if err != nil {
		return err
	}
	s.alloc, err = s.sys.Root.SpawnNamed(props, b.actorName(pb.AllocatorActor, s.id))
	b.mu.Lock()
	s.down = false
	b.mu.Unlock()
	return err
}

// kill stops a server at once, as a crash would: its actors, its Raft
// node, its actor system's listener and its gossip member (no leave:
// the others find it dead).
func (b *bench) kill(s *server) {
	b.mu.Lock()
	s.down = true
	b.mu.Unlock()
	_ = s.sys.Root.StopFuture(s.alloc).Wait()
	_ = s.sys.Root.StopFuture(s.host).Wait()
	_ = s.srv.Shutdown()
	if s.rem != nil {
		s.rem.Shutdown(false)
	}
	_ = s.gossip.Shutdown()
}

// restart reopens a killed server on its data directory, its Raft and
// gossip ports, with a new actor system.
func (b *bench) restart(s *server) error {
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
	for range 50 {
		if err = b.startMember(s); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	return b.startActors(s)
}

// stopServer stops a live server gracefully.
func (b *bench) stopServer(s *server) {
	if s.srv == nil || s.down {
		return
	}
	if s.alloc != nil {
		_ = s.sys.Root.StopFuture(s.alloc).Wait()
	}
	if s.host != nil {
		_ = s.sys.Root.StopFuture(s.host).Wait()
	}
	_ = s.srv.Shutdown()
	if s.gossip != nil {
		_ = s.gossip.Leave(time.Second)
		_ = s.gossip.Shutdown()
	}
	if s.rem != nil {
		s.rem.Shutdown(false)
	}
}
