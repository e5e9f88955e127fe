package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"pollux/actors/allocator"
	"pollux/actors/fedlink"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
)

// federationOpts are the federation flags of `pollux server`
// (docs/federation.md).
type federationOpts struct {
	cluster, file, addr, gossipKey string
	gossipPort                     int
	interval                       time.Duration
}

func (o *federationOpts) flags(f *pflag.FlagSet) {
	f.StringVar(&o.cluster, "cluster", "", "this cluster's name (1-63 characters of [A-Za-z0-9._-]): written once into the replicated state; "+
		"a server started later with another name refuses to run. Required with --federation")
	f.StringVar(&o.file, "federation", "", "federation file: the lab's quota and its peer clusters (name, federation addresses, CA bundle "+
		"file), docs/federation.md; the server's certificate must name --cluster (pollux tls cert create --cluster)")
	f.StringVar(&o.addr, "federation-addr", "", "address (host:port) of the federation listener, where peer clusters' servers "+
		"reach this one over mutual TLS (required with --federation)")
	f.DurationVar(&o.interval, "federation-interval", fedlink.DefaultInterval, "how often the leader exchanges bids with the peers "+
		"and plans leases; a peer is noticed lost after two to three of them")
	f.StringVar(&o.gossipKey, "federation-gossip-key", "", "key file of the federation's gossip pool (pollux keygen; shared by the "+
		"federation, distinct from the lab's --gossip-key): every server joins the pool, where labs find each other's servers and "+
		"notice a lost lab within seconds (without it, only the bid exchange notices)")
	f.IntVar(&o.gossipPort, "federation-gossip-port", 0, "port of the federation's gossip pool (0: any free port; peers list it as "+
		"\"gossip\" in their federation files)")
}

// check validates the flags; it returns the loaded federation file (nil
// without --federation).
func (o *federationOpts) check(insecure bool) (*fedlink.Federation, error) {
	if o.cluster != "" && !federation.ValidName(o.cluster) {
		return nil, fmt.Errorf("server: --cluster %q: want 1-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit", o.cluster)
	}
	if o.cluster == pki.DefaultCluster {
		return nil, fmt.Errorf("server: --cluster %q is the trust domain of certificates that name no cluster; choose another name", o.cluster)
	}
	if o.file == "" {
		if o.addr != "" || o.gossipKey != "" || o.gossipPort != 0 {
			return nil, errors.New("server: --federation-addr, --federation-gossip-key and --federation-gossip-port need --federation")
		}
		return nil, nil
	}
	if o.gossipPort != 0 && o.gossipKey == "" {
		return nil, errors.New("server: --federation-gossip-port needs --federation-gossip-key (the federation's gossip is encrypted)")
	}
	if o.gossipPort < 0 || o.gossipPort > 65535 {
		return nil, fmt.Errorf("server: --federation-gossip-port %d", o.gossipPort)
	}
	switch {
	case o.cluster == "":
		return nil, errors.New("server: --federation needs --cluster (this cluster's name)")
	case o.addr == "":
		return nil, errors.New("server: --federation needs --federation-addr")
	case insecure:
		return nil, errors.New("server: --federation runs over mutual TLS only; it cannot be combined with --insecure")
	case o.interval < 10*time.Millisecond || o.interval > time.Hour:
		return nil, fmt.Errorf("server: --federation-interval %v outside [10ms, 1h]", o.interval)
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return nil, fmt.Errorf("server: --federation-addr %q: %w", o.addr, err)
	}
	fed, err := fedlink.Load(o.file, o.cluster)
	if err != nil {
		return nil, err
	}
	if o.gossipKey == "" && len(fed.GossipSeeds()) > 0 {
		return nil, fmt.Errorf("server: %s lists peers' gossip addresses: --federation-gossip-key is needed to join their pool", o.file)
	}
	return fed, nil
}

// joinFederationGossip starts this server's member of the federation's
// gossip pool, <cluster>/<id>, advertising its federation address, and
// keeps it joined to the peers' seeds. lanKeys are the lab's own gossip
// keys, which the federation's may not share.
func joinFederationGossip(ctx context.Context, o federationOpts, id, bind, fedAddr string, fed *fedlink.Federation, lanKeys [][]byte,
	log, libLog *slog.Logger) (*cluster.Membership, error) {
	keys, err := cluster.ReadKeyFile(o.gossipKey)
	if err != nil {
		return nil, badInput(fmt.Errorf("server: --federation-gossip-key: %w", err))
	}
	for _, k := range keys {
		for _, l := range lanKeys {
			if bytes.Equal(k, l) {
				return nil, badInput(errors.New("server: --federation-gossip-key shares a key with --gossip-key: the federation's pool needs a key of its own, or every peer lab could join this lab's gossip"))
			}
		}
	}
	wan, err := cluster.Start(cluster.Config{Name: o.cluster + "/" + id, BindAddr: bind, BindPort: o.gossipPort, WAN: true, Label: cluster.WANLabel,
		Keys: keys, Logger: libLog, Meta: cluster.Meta{Role: cluster.RoleServer, FederationAddr: fedAddr}})
	if err != nil {
		return nil, fmt.Errorf("server: federation gossip: %w", err)
	}
	go func() {
		for ev := range wan.Events() {
			log.Info("federation gossip: "+ev.Kind.String(), "member", ev.Member.Name, "federation_addr", ev.Member.Meta.FederationAddr)
		}
	}()
	if seeds := fed.GossipSeeds(); len(seeds) > 0 {
		if _, err := wan.Join(seeds); err != nil {
			log.Info("server: no peer of the federation's gossip answered yet; retrying", "seeds", seeds, "err", err)
		}
		go wan.KeepJoined(ctx, seeds, 5*time.Second)
	}
	return wan, nil
}

// setLab writes the lab's identity (its name once, its CA, and with a
// federation file its quota and peers) once a leader can take it; if
// the cluster already has another name it stops the server (fail).
func setLab(ctx context.Context, srv *consensus.Server, c state.SetLab, log *slog.Logger, fail context.CancelCauseFunc) {
	for {
		if st := srv.LocalState(); st.Fed != nil && st.Fed.Lab.Name != c.Name {
			fail(badInput(fmt.Errorf("server: --cluster %s: this cluster is named %s (set once, when it was first started with --cluster)", c.Name, st.Fed.Lab.Name)))
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := srv.ApplyCommand(cctx, &c)
		cancel()
		switch {
		case err == nil:
			log.Info("server: federation identity", "cluster", c.Name, "peers", len(c.Peers), "quota", c.Quota)
			return
		case errors.Is(err, state.ErrClusterConfig), errors.Is(err, state.ErrInvalid):
			fail(badInput(fmt.Errorf("server: --cluster %s: %w", c.Name, err)))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// labOf is the SetLab a server writes: a cluster named without a
// federation file keeps the quota and peers it has (none at first).
func labOf(o federationOpts, fed *fedlink.Federation, creds *pki.Credentials) state.SetLab {
	c := state.SetLab{Name: o.cluster, CA: "none", NameOnly: fed == nil}
	if creds != nil {
		c.CA = pki.Fingerprint(caOf(creds))
	}
	if fed != nil {
		c.Quota, c.Peers = fed.Quota, fed.LabPeers()
	}
	return c
}

// caOf is the CA certificate that verified the server's own certificate
// (what its peers' federation files name).
func caOf(creds *pki.Credentials) *x509.Certificate {
	chains, err := creds.Cert.Leaf.Verify(x509.VerifyOptions{Roots: creds.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil || len(chains) == 0 {
		return creds.Cert.Leaf
	}
	return chains[0][len(chains[0])-1]
}

// serveFederation starts the federation listener and the link's rounds;
// it returns a function that stops them.
// members and wan (the lab's gossip and the federation's) are read once
// they have started (nil before; wan stays nil without a gossip key).
//
// Workers on borrowed GPUs: this lab's node actors send the reports and
// exits of borrowers' workers to the allocator on sys (which relays
// them), and what lenders relay about this lab's own runs goes to the
// allocator (acks) and the jobs' actors (reports, exits).
func serveFederation(ctx context.Context, o federationOpts, fed *fedlink.Federation, creds *pki.Credentials, srv *consensus.Server,
	sys *actor.ActorSystem, members, wan **cluster.Membership, log *slog.Logger) (*fedlink.Link, string, func(), error) {
	alloc := actor.NewPID(sys.Address(), pb.AllocatorActor)
	cfg := fedlink.Config{Name: o.cluster, Creds: creds, Federation: fed, Store: srv, Interval: o.interval, Logger: log,
		LeaderAddr: func() string {
			if *members == nil {
				return ""
			}
			return leaderFederationAddr(srv, *members)
		},
		RelayOwner: func() *pb.Ref { return &pb.Ref{Address: alloc.Address, Id: alloc.Id} },
		OnAck:      func(ack *pb.AssignAck) { sys.Root.Send(alloc, ack) },
		OnOrder:    func() { sys.Root.Send(alloc, allocator.OrdersChanged{}) },
		Deliver: func(to *pb.Ref, msg proto.Message) {
			sys.Root.Send(actor.NewPID(to.Address, to.Id), msg)
		}}
	if o.gossipKey != "" {
		cfg.Gossip = func() []cluster.Member {
			if *wan == nil {
				return nil
			}
			return (*wan).Members()
		}
	}
	link, err := fedlink.New(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	tc, err := creds.FederationServerConfig(fed.Pools)
	if err != nil {
		return nil, "", nil, err
	}
	inner, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("server: federation listener: %w", err)
	}
	ln := pki.NewListener(inner, tc, pki.ListenerOptions{Channel: pki.ChannelFederation, Logger: log})
	hs := &http.Server{Handler: link, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() { _ = hs.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); link.Run(rctx) }()
	return link, ln.Addr().String(), func() { cancel(); _ = hs.Close(); <-done; link.Close() }, nil
}

// leaderFederationAddr is the federation address the Raft leader
// advertises in the gossip ("" when unknown).
func leaderFederationAddr(srv *consensus.Server, members *cluster.Membership) string {
	_, addr := srv.Leader()
	if addr == "" {
		return ""
	}
	for _, m := range append(members.Members(), members.Local()) {
		if m.Meta.RaftAddr == string(addr) {
			return m.Meta.FederationAddr
		}
	}
	return ""
}
