package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus"
)

// securityOpts are the transport-security flags of servers and agents.
type securityOpts struct {
	ca, cert, key, gossipKey string
	insecure                 bool
	// cluster, when set (pollux server --cluster), is the cluster the
	// certificate must name.
	cluster string
}

func (o *securityOpts) flags(f *pflag.FlagSet) {
	f.StringVar(&o.ca, "ca", "", "cluster CA certificate (pollux tls ca create)")
	f.StringVar(&o.cert, "cert", "", "this process's certificate (pollux tls cert create)")
	f.StringVar(&o.key, "key", "", "this process's certificate key")
	f.StringVar(&o.gossipKey, "gossip-key", "", "gossip key file (pollux keygen; one key per line, the first encrypts; re-read on SIGHUP)")
	f.BoolVar(&o.insecure, "insecure", false, "run without TLS (plaintext Raft, actors, API and reports): development only")
}

// security is what a server or agent secures its channels with. In
// insecure mode creds is nil (and gossip keys may still be given).
type security struct {
	creds      *pki.Credentials
	caPath     string // absolute
	gossipKeys [][]byte
	gossipFile string
}

// certWarning is how long before expiry a process warns about its
// certificate.
const certWarning = 30 * 24 * time.Hour

// load checks the flags and reads the files. The certificate must be of
// role, named name, and valid for every concrete host of hosts.
func (o securityOpts) load(role pki.Role, name string, hosts []string, log *slog.Logger) (*security, error) {
	cmd := string(role)
	var sec security
	if o.gossipKey != "" {
		keys, err := cluster.ReadKeyFile(o.gossipKey)
		if err != nil {
			return nil, badInput(fmt.Errorf("%s: --gossip-key: %w", cmd, err))
		}
		sec.gossipKeys, sec.gossipFile = keys, o.gossipKey
	}
	if o.insecure {
		if o.ca != "" || o.cert != "" || o.key != "" {
			return nil, badInput(fmt.Errorf("%s: --insecure and --ca/--cert/--key contradict each other", cmd))
		}
		log.Warn("INSECURE MODE: Raft, forwarded writes, actor messages, the HTTP API and worker reports are PLAINTEXT " +
			"and unauthenticated; anyone who reaches a port can change the cluster's state. Development only: " +
			"see docs/security.md to run with TLS.")
		if sec.gossipKeys == nil {
			log.Warn("INSECURE MODE: gossip is not encrypted (no --gossip-key)")
		}
		return &sec, nil
	}
	var missing []string
	for _, f := range []struct{ flag, v string }{{"--ca", o.ca}, {"--cert", o.cert}, {"--key", o.key}, {"--gossip-key", o.gossipKey}} {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		return nil, badInput(fmt.Errorf("%s: missing %s: a cluster runs with TLS and an encrypted gossip; make the files with "+
			"`pollux tls ca create`, `pollux tls cert create --role %s --name %s` and `pollux keygen` (docs/security.md), "+
			"or pass --insecure for a development cluster", cmd, strings.Join(missing, ", "), role, name))
	}
	creds, err := pki.LoadCredentials(o.ca, o.cert, o.key)
	if err != nil {
		return nil, badInput(fmt.Errorf("%s: %w", cmd, err))
	}
	if got := creds.Identity; got.Role != role || got.Name != name || (o.cluster != "" && got.Cluster != o.cluster) {
		want, how := pki.Identity{Role: role, Name: name, Cluster: o.cluster}, ""
		if o.cluster != "" {
			how = " --cluster " + o.cluster
		}
		return nil, badInput(fmt.Errorf("%s: --cert is the certificate of %s, want %s (pollux tls cert create --role %s --name %s%s)",
			cmd, got, want, role, name, how))
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			continue
		}
		if err := creds.Cert.Leaf.VerifyHostname(h); err != nil {
			return nil, badInput(fmt.Errorf("%s: --cert is not valid for %s, where peers reach this %s: make it with --host %s (%w)",
				cmd, h, role, h, err))
		}
	}
	if left := time.Until(creds.NotAfter); left < certWarning {
		log.Warn("certificate expires soon: renew it (docs/security.md)", "expires", creds.NotAfter.UTC().Format(time.RFC3339))
	}
	sec.creds = creds
	if sec.caPath, err = filepath.Abs(o.ca); err != nil {
		return nil, fmt.Errorf("%s: --ca: %w", cmd, err)
	}
	log.Info("TLS on: certificates of the cluster CA required on every internal channel", "identity", creds.Identity.String(),
		"expires", creds.NotAfter.UTC().Format(time.RFC3339), "gossip_keys", len(sec.gossipKeys))
	return &sec, nil
}

// raftTLS is the Raft port's TLS (nil when insecure).
func (s *security) raftTLS() (*consensus.TLS, error) {
	if s.creds == nil {
		return nil, nil
	}
	srv, err1 := s.creds.ServerConfig(pki.ChannelRaft)
	cli, err2 := s.creds.ClientConfig(pki.ChannelRaft)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &consensus.TLS{Server: srv, Client: cli}, nil
}

// dropWhileUnreachable makes protoactor's remote give up on a peer it
// cannot connect to after one attempt, dropping what was sent to it
// meanwhile, instead of holding the messages through up to five
// attempts (about ten seconds) and delivering them all once the peer is
// back. A node agent restarted within that time would otherwise receive
// the assignments sent while it was down, oldest first, and act on
// them: its fencing state on disk predates them all, so it would start
// the workers of a job cancelled (or moved) in the meantime before the
// newer assignments stop them again (pollux chaos found it: a worker
// started five seconds after its job's cancel was acknowledged). The
// protocol needs no redelivery: every message is repeated or reconciled
// within a round (docs/control-plane.md).
func dropWhileUnreachable(c *remote.Config) { c.MaxRetryCount = 1 }

// remoteOptions configure protoactor's gRPC transport: no redelivery
// to an unreachable peer (dropWhileUnreachable), and unless insecure,
// TLS credentials on the dialer and the listener (a refused handshake is
// logged naming the peer) and a bound on the handshake.
func (s *security) remoteOptions(log *slog.Logger) ([]remote.ConfigOption, error) {
	if s.creds == nil {
		return []remote.ConfigOption{dropWhileUnreachable}, nil
	}
	srv, err1 := s.creds.ServerConfig(pki.ChannelActor)
	cli, err2 := s.creds.ClientConfig(pki.ChannelActor)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return []remote.ConfigOption{
		dropWhileUnreachable,
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cli))),
		remote.WithServerOptions(grpc.Creds(loggedCreds{credentials.NewTLS(srv), log}), grpc.ConnectionTimeout(pki.DefaultHandshakeTimeout)),
	}, nil
}

// loggedCreds logs every refused handshake of gRPC's listener once.
type loggedCreds struct {
	credentials.TransportCredentials
	log *slog.Logger
}

func (c loggedCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.log.Warn("pki: refused connection", "channel", pki.ChannelActor, "peer", conn.RemoteAddr().String(), "err", err.Error())
	}
	return out, info, err
}

func (c loggedCreds) Clone() credentials.TransportCredentials {
	return loggedCreds{c.TransportCredentials.Clone(), c.log}
}

// listen wraps a listener of ch in TLS (unchanged when insecure).
func (s *security) listen(ln net.Listener, ch pki.Channel, log *slog.Logger) (net.Listener, error) {
	if s.creds == nil {
		return ln, nil
	}
	cfg, err := s.creds.ServerConfig(ch)
	if err != nil {
		return nil, err
	}
	return pki.NewListener(ln, cfg, pki.ListenerOptions{Channel: ch, Logger: log}), nil
}

// reloadGossipKeys re-reads the gossip key file on every SIGHUP and
// installs its keys (a rotation step, docs/security.md) until ctx ends.
// A bad file is logged and changes nothing.
func (s *security) reloadGossipKeys(ctx context.Context, m *cluster.Membership, log *slog.Logger) {
	if s.gossipFile == "" {
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
			keys, err := cluster.ReadKeyFile(s.gossipFile)
			if err == nil {
				err = m.SetKeys(keys)
			}
			if err != nil {
				log.Error("gossip keys not reloaded", "file", s.gossipFile, "err", err)
			}
		}
	}()
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
