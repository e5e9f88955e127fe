package server

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
	"google.golang.org/protobuf/proto"

	"pollux/actors/allocator"
	"pollux/actors/fedlink"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
	"pollux/internal/secure"
	"pollux/internal/usage"
)

// Federation is the federation configuration of a server
// (docs/federation.md); the comments name the flags.
type Federation struct {
	// Cluster is this cluster's name (--cluster), written once into the
	// replicated state; File the federation file (--federation: the
	// lab's quota and its peers); Addr the federation listener's
	// address (--federation-addr).
	Cluster, File, Addr string
	// GossipKey is the key file of the federation's gossip pool
	// (--federation-gossip-key), GossipPort its port.
	GossipKey  string
	GossipPort int
	// Interval is how often the leader exchanges bids with the peers
	// (--federation-interval).
	Interval time.Duration
}

// check validates the settings; it returns the loaded federation file
// (nil without one).
func (o *Federation) check(insecure bool) (*fedlink.Federation, error) {
	if o.Cluster != "" && !federation.ValidName(o.Cluster) {
		return nil, fmt.Errorf("server: --cluster %q: want 1-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit", o.Cluster)
	}
	if o.Cluster == pki.DefaultCluster {
		return nil, fmt.Errorf("server: --cluster %q is the trust domain of certificates that name no cluster; choose another name", o.Cluster)
	}
	if o.File == "" {
		if o.Addr != "" || o.GossipKey != "" || o.GossipPort != 0 {
			return nil, errors.New("server: --federation-addr, --federation-gossip-key and --federation-gossip-port need --federation")
		}
		return nil, nil
	}
	if o.GossipPort != 0 && o.GossipKey == "" {
		return nil, errors.New("server: --federation-gossip-port needs --federation-gossip-key (the federation's gossip is encrypted)")
	}
	if o.GossipPort < 0 || o.GossipPort > 65535 {
		return nil, fmt.Errorf("server: --federation-gossip-port %d", o.GossipPort)
	}
	switch {
	case o.Cluster == "":
		return nil, errors.New("server: --federation needs --cluster (this cluster's name)")
	case o.Addr == "":
		return nil, errors.New("server: --federation needs --federation-addr")
	case insecure:
		return nil, errors.New("server: --federation runs over mutual TLS only; it cannot be combined with --insecure")
	case o.Interval < 10*time.Millisecond || o.Interval > time.Hour:
		return nil, fmt.Errorf("server: --federation-interval %v outside [10ms, 1h]", o.Interval)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return nil, fmt.Errorf("server: --federation-addr %q: %w", o.Addr, err)
	}
	fed, err := fedlink.Load(o.File, o.Cluster)
	if err != nil {
		return nil, err
	}
	if o.GossipKey == "" && len(fed.GossipSeeds()) > 0 {
		return nil, fmt.Errorf("server: %s lists peers' gossip addresses: --federation-gossip-key is needed to join their pool", o.File)
	}
	return fed, nil
}

// joinFederationGossip starts this server's member of the federation's
// gossip pool, <cluster>/<id>, advertising its federation address, and
// keeps it joined to the peers' seeds. lanKeys are the lab's own gossip
// keys, which the federation's may not share.
func joinFederationGossip(ctx context.Context, o Federation, id, bind, fedAddr string, fed *fedlink.Federation, lanKeys [][]byte,
	log, libLog *slog.Logger) (*cluster.Membership, error) {
	if err := pki.CheckPrivate(o.GossipKey); err != nil {
		return nil, usage.Errorf("server: --federation-gossip-key: %w", err)
	}
	keys, err := cluster.ReadKeyFile(o.GossipKey)
	if err != nil {
		return nil, usage.Errorf("server: --federation-gossip-key: %w", err)
	}
	for _, k := range keys {
		for _, l := range lanKeys {
			if bytes.Equal(k, l) {
				return nil, usage.Errorf("server: --federation-gossip-key shares a key with --gossip-key: the federation's pool needs a key of its own, or every peer lab could join this lab's gossip")
			}
		}
	}
	wan, err := cluster.Start(cluster.Config{Name: o.Cluster + "/" + id, BindAddr: bind, BindPort: o.GossipPort, WAN: true, Label: cluster.WANLabel,
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
			fail(usage.Errorf("server: --cluster %s: this cluster is named %s (set once, when it was first started with --cluster)", c.Name, st.Fed.Lab.Name))
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
			fail(usage.Errorf("server: --cluster %s: %w", c.Name, err))
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
func labOf(o Federation, fed *fedlink.Federation, creds *pki.Credentials) state.SetLab {
	c := state.SetLab{Name: o.Cluster, CA: "none", NameOnly: fed == nil}
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

// startFederation starts the federation link, its listener and, with a
// gossip key, this server's member of the federation's gossip pool.
func (s *server) startFederation(ctx context.Context) error {
	if s.fed == nil {
		return nil
	}
	o := s.cfg.Federation
	link, addr, stop, err := s.serveFederation(ctx)
	if err != nil {
		return err
	}
	s.onClose(stop)
	s.link, s.fedAddr = link, addr
	if o.GossipKey == "" {
		return nil
	}
	wan, err := joinFederationGossip(ctx, o, s.cfg.ID, s.cfg.Bind, addr, s.fed, s.sec.GossipKeys, s.log, s.lib.With("lib", "memberlist-wan"))
	if err != nil {
		return err
	}
	s.wan.Store(wan)
	s.onClose(func() { _ = wan.Leave(time.Second); _ = wan.Shutdown() })
	s.wanAddr = wan.Addr()
	return nil
}

// serveFederation starts the federation listener and the link's rounds;
// it returns a function that stops them. The lab's gossip and the
// federation's (s.members, s.wan) are read once they have started (nil
// before; wan stays nil without a gossip key).
//
// Workers on borrowed GPUs: this lab's node actors send the reports and
// exits of borrowers' workers to the allocator on s.sys (which relays
// them), and what lenders relay about this lab's own runs goes to the
// allocator (acks) and the jobs' actors (reports, exits).
func (s *server) serveFederation(ctx context.Context) (*fedlink.Link, string, func(), error) {
	o, sys, log := s.cfg.Federation, s.sys, s.log
	alloc := actor.NewPID(sys.Address(), pb.AllocatorActor)
	cfg := fedlink.Config{Name: o.Cluster, Creds: s.sec.Creds, Federation: s.fed, Store: s.srv, Interval: o.Interval, Logger: log,
		LeaderAddr: func() string {
			members := s.members.Load()
			if members == nil {
				return ""
			}
			return leaderFederationAddr(s.srv, members)
		},
		RelayOwner: func() *pb.Ref { return &pb.Ref{Address: alloc.Address, Id: alloc.Id} },
		OnAck:      func(ack *pb.AssignAck) { sys.Root.Send(alloc, ack) },
		OnOrder:    func() { sys.Root.Send(alloc, allocator.OrdersChanged{}) },
		Deliver: func(to *pb.Ref, msg proto.Message) {
			sys.Root.Send(actor.NewPID(to.Address, to.Id), msg)
		}}
	if o.GossipKey != "" {
		cfg.Gossip = func() []cluster.Member {
			wan := s.wan.Load()
			if wan == nil {
				return nil
			}
			return wan.Members()
		}
	}
	link, err := fedlink.New(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	tc, err := s.sec.Creds.FederationServerConfig(s.fed.Pools)
	if err != nil {
		return nil, "", nil, err
	}
	inner, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("server: federation listener: %w", err)
	}
	// The peers' servers (the file's addresses, and those the
	// federation's gossip knows) have room kept like the lab's members.
	peers := &pki.AddrSet{}
	gctx, stopTracking := context.WithCancel(ctx)
	secure.Track(gctx, peers, time.Second, func() []string {
		var out []string
		for _, p := range s.fed.Peers {
			out = append(out, p.Addresses...)
		}
		if cfg.Gossip != nil {
			for _, m := range cfg.Gossip() {
				out = append(out, m.Addr, m.Meta.FederationAddr)
			}
		}
		return out
	})
	gate := s.sec.Gate(pki.ChannelFederation, log, peers.Contains)
	ln := pki.NewListener(inner, tc, pki.ListenerOptions{Channel: pki.ChannelFederation, Logger: log, Gate: gate})
	hs := &http.Server{Handler: link, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() { _ = hs.Serve(ln) }()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); link.Run(rctx) }()
	return link, ln.Addr().String(), func() { cancel(); stopTracking(); _ = hs.Close(); <-done; link.Close() }, nil
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
