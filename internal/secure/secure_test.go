package secure

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"

	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
	"pollux/internal/usage"
)

// bundle is a CA with the certificates of server s0 and agent a0, and a
// gossip key.
func bundle(t *testing.T) *pki.Bundle {
	t.Helper()
	b, err := pki.DevBundle(filepath.Join(t.TempDir(), "tls"), []string{"s0"}, []string{"a0"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// options are the files of name in b.
func options(t *testing.T, b *pki.Bundle, name string) Options {
	t.Helper()
	cert, key, err := b.Files(name)
	if err != nil {
		t.Fatal(err)
	}
	return Options{CA: b.CA, Cert: cert, Key: key, GossipKey: b.GossipKey}
}

func TestLoadRefusesBadOptions(t *testing.T) {
	b := bundle(t)
	badKey := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(badKey, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		opts  func() Options
		role  pki.Role
		hosts []string
		err   string
	}{
		{"insecure with a certificate", func() Options { o := options(t, b, "s0"); o.Insecure = true; return o }, pki.RoleServer, nil,
			"server: --insecure and --ca/--cert/--key contradict each other"},
		{"no files", func() Options { return Options{} }, pki.RoleServer, nil, "server: missing --ca, --cert, --key, --gossip-key"},
		{"no gossip key", func() Options { o := options(t, b, "s0"); o.GossipKey = ""; return o }, pki.RoleServer, nil, "missing --gossip-key"},
		{"a bad gossip key", func() Options { o := options(t, b, "s0"); o.GossipKey = badKey; return o }, pki.RoleServer, nil, "server: --gossip-key"},
		{"another role's certificate", func() Options { return options(t, b, "a0") }, pki.RoleServer, nil,
			"server: --cert is the certificate of agent/a0, want server/s0"},
		{"another cluster", func() Options { o := options(t, b, "s0"); o.Cluster = "lab-a"; return o }, pki.RoleServer, nil,
			"want lab-a/server/s0 (pollux tls cert create --role server --name s0 --cluster lab-a)"},
		{"another host", func() Options { return options(t, b, "s0") }, pki.RoleServer, []string{"127.0.0.1", "10.9.9.9"},
			"server: --cert is not valid for 10.9.9.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.opts().Load(tt.role, "s0", tt.hosts, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, usage.ErrBadSetting) {
				t.Fatalf("%v, want a bad setting saying %q", err, tt.err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	b := bundle(t)
	var log logbuf.Buffer
	sec, err := options(t, b, "a0").Load(pki.RoleAgent, "a0", []string{"127.0.0.1", "", "0.0.0.0"}, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if sec.Creds == nil || sec.Creds.Identity.Name != "a0" || !filepath.IsAbs(sec.CAPath) || len(sec.GossipKeys) != 1 || sec.GossipFile != b.GossipKey {
		t.Errorf("security %+v", sec)
	}
	if len(log.Lines("TLS on", "identity=agent/a0")) != 1 {
		t.Errorf("log %s", log.String())
	}

	log = logbuf.Buffer{}
	sec, err = Options{Insecure: true}.Load(pki.RoleServer, "s0", nil, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil || sec.Creds != nil || sec.GossipKeys != nil {
		t.Fatalf("insecure: %+v, %v", sec, err)
	}
	if len(log.Lines("INSECURE MODE")) != 2 || len(log.Lines("gossip is not encrypted")) != 1 {
		t.Errorf("insecure log %s", log.String())
	}
}

// Insecure, the actor transport only drops messages to unreachable
// peers and listeners stay plaintext; secure, both use TLS.
func TestChannels(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	opts, err := RemoteOptions(nil, nil, log)
	if c := remote.Configure("127.0.0.1", 0, opts...); err != nil || len(c.ServerOptions) != 0 || len(c.DialOptions) != 1 ||
		c.EndpointWriterQueueSize != endpointQueue {
		t.Errorf("insecure remote config %+v, %v", c, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got, err := (&Security{}).Listen(ln, pki.ChannelAPI, log); got != ln || err != nil {
		t.Errorf("insecure listener %v, %v", got, err)
	}
	b := bundle(t)
	sec, err := options(t, b, "s0").Load(pki.RoleServer, "s0", nil, log)
	if err != nil {
		t.Fatal(err)
	}
	// Secure: a TLS dialer in place of the default plaintext one, a gated
	// TLS listener, and the small queues as well.
	opts, err = RemoteOptions(sec.Creds, nil, log)
	if c := remote.Configure("127.0.0.1", 0, opts...); err != nil || len(c.ServerOptions) != 2 || len(c.DialOptions) != 1 ||
		c.EndpointWriterQueueSize != endpointQueue {
		t.Errorf("secure remote config %+v, %v", c, err)
	}
	if got, err := sec.Listen(ln, pki.ChannelAPI, log); got == ln || err != nil {
		t.Errorf("secure listener %v, %v", got, err)
	}
}

// The gossip key file and the extra parts are re-read on SIGHUP: a bad
// file is logged and changes nothing, a good one is installed.
func TestReloadOnHangup(t *testing.T) {
	b := bundle(t)
	keys, err := b.GossipKeys()
	if err != nil {
		t.Fatal(err)
	}
	var log logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	m, err := cluster.Start(cluster.Config{Name: "s0", Fast: true, Keys: keys, Logger: logger, Meta: cluster.Meta{Role: cluster.RoleServer}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	file := filepath.Join(t.TempDir(), "gossip.key")
	sec := &Security{GossipKeys: keys, GossipFile: file}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sec.ReloadOnHangup(ctx, m, logger, Reload{"allow-list", func() error { return errors.New("test") }})
	hup := func(content, want string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		n := len(log.Lines(want))
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if !poll.Wait(10*time.Second, func() bool { return len(log.Lines(want)) != n }) {
			t.Fatalf("no %q logged after SIGHUP:\n%s", want, log.String())
		}
	}
	hup("not a key\n", "gossip keys not reloaded")

	key, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hup(key+"\n", "gossip keys installed")
	// The parts run in order: the first SIGHUP's extra part is done.
	if n := len(log.Lines("allow-list not reloaded")); n < 1 {
		t.Errorf("the extra part was not run (or not logged):\n%s", log.String())
	}
}

func TestRemoteOptionsKeepPeerQueuesSmall(t *testing.T) {
	creds, err := bundle(t).Credentials("s0")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*pki.Credentials{"insecure": nil, "TLS": creds} {
		opts, err := RemoteOptions(c, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cfg := remote.Configure("127.0.0.1", 0, opts...)
		if cfg.EndpointWriterQueueSize != endpointQueue || cfg.MaxRetryCount != 1 {
			t.Errorf("%s: a peer's queue starts at %d entries, %d connection attempts; want %d and 1",
				name, cfg.EndpointWriterQueueSize, cfg.MaxRetryCount, endpointQueue)
		}
	}
}
