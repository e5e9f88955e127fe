package secure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/usage"
)

// Options are the transport-security settings of a server or an agent
// (flags --ca, --cert, --key, --gossip-key and --insecure).
type Options struct {
	CA, Cert, Key, GossipKey string
	Insecure                 bool
	// Cluster, when set (pollux server --cluster with --federation), is
	// the cluster the certificate must name.
	Cluster string
}

// Security is what a server or agent secures its channels with. In
// insecure mode Creds is nil (and gossip keys may still be given).
type Security struct {
	Creds      *pki.Credentials
	CAPath     string // absolute
	GossipKeys [][]byte
	GossipFile string
	// Members are the addresses of the cluster's own members (Raft's
	// configuration, gossip, this machine's: TrackMembers), for which
	// every gate keeps room.
	Members pki.AddrSet

	mu    sync.Mutex
	gates []*pki.Gate
}

// certWarning is how long before expiry a process warns about its
// certificate.
const certWarning = 30 * 24 * time.Hour

// Load checks the options and reads the files. The certificate must be
// of role, named name, and valid for every concrete host of hosts. Bad
// options are errors marked by usage.Wrap.
func (o Options) Load(role pki.Role, name string, hosts []string, log *slog.Logger) (*Security, error) {
	cmd := string(role)
	var sec Security
	for _, f := range []struct{ flag, path string }{{"--key", o.Key}, {"--gossip-key", o.GossipKey}} {
		if f.path == "" {
			continue
		}
		if err := pki.CheckPrivate(f.path); err != nil {
			return nil, usage.Errorf("%s: %s: %w", cmd, f.flag, err)
		}
	}
	if o.GossipKey != "" {
		keys, err := cluster.ReadKeyFile(o.GossipKey)
		if err != nil {
			return nil, usage.Errorf("%s: --gossip-key: %w", cmd, err)
		}
		sec.GossipKeys, sec.GossipFile = keys, o.GossipKey
	}
	if o.Insecure {
		if o.CA != "" || o.Cert != "" || o.Key != "" {
			return nil, usage.Errorf("%s: --insecure and --ca/--cert/--key contradict each other", cmd)
		}
		log.Warn("INSECURE MODE: Raft, forwarded writes, actor messages, the HTTP API and worker reports are PLAINTEXT " +
			"and unauthenticated; anyone who reaches a port can change the cluster's state. Development only: " +
			"see docs/security.md to run with TLS.")
		if sec.GossipKeys == nil {
			log.Warn("INSECURE MODE: gossip is not encrypted (no --gossip-key)")
		}
		return &sec, nil
	}
	creds, err := o.credentials(role, name, hosts)
	if err != nil {
		return nil, err
	}
	if left := time.Until(creds.NotAfter); left < certWarning {
		log.Warn("certificate expires soon: renew it (docs/security.md)", "expires", creds.NotAfter.UTC().Format(time.RFC3339))
	}
	sec.Creds = creds
	if sec.CAPath, err = filepath.Abs(o.CA); err != nil {
		return nil, fmt.Errorf("%s: --ca: %w", cmd, err)
	}
	log.Info("TLS on: certificates of the cluster CA required on every internal channel", "identity", creds.Identity.String(),
		"expires", creds.NotAfter.UTC().Format(time.RFC3339), "gossip_keys", len(sec.GossipKeys))
	return &sec, nil
}

// credentials loads the certificate and checks that it is role's, named
// name, of the cluster (if o names one) and valid for hosts.
func (o Options) credentials(role pki.Role, name string, hosts []string) (*pki.Credentials, error) {
	cmd := string(role)
	var missing []string
	for _, f := range []struct{ flag, v string }{{"--ca", o.CA}, {"--cert", o.Cert}, {"--key", o.Key}, {"--gossip-key", o.GossipKey}} {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		return nil, usage.Errorf("%s: missing %s: a cluster runs with TLS and an encrypted gossip; make the files with "+
			"`pollux tls ca create`, `pollux tls cert create --role %s --name %s` and `pollux keygen` (docs/security.md), "+
			"or pass --insecure for a development cluster", cmd, strings.Join(missing, ", "), role, name)
	}
	creds, err := pki.LoadCredentials(o.CA, o.Cert, o.Key)
	if err != nil {
		return nil, usage.Errorf("%s: %w", cmd, err)
	}
	if got := creds.Identity; got.Role != role || got.Name != name || (o.Cluster != "" && got.Cluster != o.Cluster) {
		want, how := pki.Identity{Role: role, Name: name, Cluster: o.Cluster}, ""
		if o.Cluster != "" {
			how = " --cluster " + o.Cluster
		}
		return nil, usage.Errorf("%s: --cert is the certificate of %s, want %s (pollux tls cert create --role %s --name %s%s)",
			cmd, got, want, role, name, how)
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			continue
		}
		if err := creds.Cert.Leaf.VerifyHostname(h); err != nil {
			return nil, usage.Errorf("%s: --cert is not valid for %s, where peers reach this %s: make it with --host %s (%w)",
				cmd, h, role, h, err)
		}
	}
	return creds, nil
}

// dropWhileUnreachable makes protoactor's remote give up on a peer after
// one failed connection, dropping what was sent to it meanwhile: held
// through the default five attempts, stale assignments would reach an
// agent restarted within them and start workers of jobs cancelled or
// moved since. Nothing needs redelivery: every message is repeated or
// reconciled within a round (docs/control-plane.md).
func dropWhileUnreachable(c *remote.Config) { c.MaxRetryCount = 1 }

// endpointQueue is the initial length of the queue protoactor keeps for
// every peer a process sends to. The queue doubles when full; its
// default initial length, a million, is a 16 MiB slice of pointers per
// peer, allocated on the first message and scanned by every garbage
// collection: 8 GiB on a server talking to 512 agents
// (docs/benchmarks.md).
const endpointQueue = 1024

func smallEndpointQueues(c *remote.Config) { c.EndpointWriterQueueSize = endpointQueue }

// RemoteOptions configure protoactor's gRPC transport of a process
// holding creds: no redelivery to an unreachable peer, small initial
// queues per peer (they grow as needed), and unless creds
// is nil (insecure), TLS credentials on the dialer and the listener,
// each connection to the listener admitted by gate before its handshake
// and its handshake bounded by gate's deadline (a refusal is logged
// naming the peer on log). A nil gate is one of pki's defaults, without
// members.
func RemoteOptions(creds *pki.Credentials, gate *pki.Gate, log *slog.Logger) ([]remote.ConfigOption, error) {
	if creds == nil {
		return []remote.ConfigOption{dropWhileUnreachable, smallEndpointQueues}, nil
	}
	if gate == nil {
		gate = pki.NewGate(pki.GateOptions{Channel: pki.ChannelActor, Logger: log})
	}
	srv, err1 := creds.ServerConfig(pki.ChannelActor)
	cli, err2 := creds.ClientConfig(pki.ChannelActor)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return []remote.ConfigOption{
		dropWhileUnreachable,
		smallEndpointQueues,
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cli))),
		remote.WithServerOptions(grpc.Creds(gatedCreds{credentials.NewTLS(srv), gate}), grpc.ConnectionTimeout(gate.HandshakeTimeout())),
	}, nil
}

// gatedCreds admits every connection of gRPC's listener through a gate
// before its handshake (gRPC accepts without bound and hands each
// connection to ServerHandshake in a goroutine of its own), bounds the
// handshake by the gate's deadline and logs every refusal once.
type gatedCreds struct {
	credentials.TransportCredentials
	gate *pki.Gate
}

func (c gatedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	t, err := c.gate.Admit(conn.RemoteAddr())
	if err != nil {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(c.gate.HandshakeTimeout()))
	out, info, err := c.TransportCredentials.ServerHandshake(t.Conn(conn))
	t.Done()
	if err != nil {
		t.Closed()
		c.gate.Refuse(conn.RemoteAddr(), pki.ReasonHandshake, err)
		return out, info, err
	}
	// gRPC reads the HTTP/2 preface next and then clears the deadline.
	_ = conn.SetDeadline(time.Now().Add(c.gate.HandshakeTimeout()))
	return out, info, err
}

func (c gatedCreds) Clone() credentials.TransportCredentials {
	return gatedCreds{c.TransportCredentials.Clone(), c.gate}
}

// Listen wraps a listener of ch in TLS (unchanged when insecure), its
// connections admitted by a gate of ch (Gate).
func (s *Security) Listen(ln net.Listener, ch pki.Channel, log *slog.Logger) (net.Listener, error) {
	if s.Creds == nil {
		return ln, nil
	}
	cfg, err := s.Creds.ServerConfig(ch)
	if err != nil {
		return nil, err
	}
	return pki.NewListener(ln, cfg, pki.ListenerOptions{Channel: ch, Logger: log, Gate: s.Gate(ch, log, nil)}), nil
}

// Reload is one thing a process re-reads on SIGHUP: its name for the
// log and what re-reads it (an error leaves it as it was).
type Reload struct {
	What string
	Do   func() error
}

// ReloadOnHangup re-reads on every SIGHUP, until ctx ends, the gossip
// key file (installing its keys in m; a rotation step,
// docs/security.md), the certificate and key (pki.Credentials.Renew),
// and each of also. Each failure is logged and changes nothing of its
// part.
func (s *Security) ReloadOnHangup(ctx context.Context, m *cluster.Membership, log *slog.Logger, also ...Reload) {
	var parts []Reload
	if s.GossipFile != "" {
		parts = append(parts, Reload{"gossip keys", func() error {
			keys, err := cluster.ReadKeyFile(s.GossipFile)
			if err != nil {
				return err
			}
			return m.SetKeys(keys)
		}})
	}
	if s.Creds != nil {
		parts = append(parts, Reload{"certificate", func() error {
			notAfter, err := s.Creds.Renew()
			if err == nil {
				log.Info("certificate reloaded", "expires", notAfter.UTC().Format(time.RFC3339))
			}
			return err
		}})
	}
	parts = append(parts, also...)
	if len(parts) == 0 {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			for _, p := range parts {
				if err := p.Do(); err != nil {
					log.Error(p.What+" not reloaded", "err", err)
				}
			}
		}
	}()
}
