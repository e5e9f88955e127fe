package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/internal/logbuf"
	"pollux/internal/poll"
)

// fixture is a CA with issued credentials, and a second CA.
type fixture struct {
	t     *testing.T
	ca    *CA
	other *CA
	dir   string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca, err := NewCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(CAOptions{CommonName: "another CA"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, _, err := WriteCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ca: ca, other: other, dir: dir}
}

// creds issues id with ca (default f.ca) and loads it as Credentials
// through the files, as a process does.
func (f *fixture) creds(id Identity) *Credentials {
	f.t.Helper()
	is, err := f.ca.Issue(CertRequest{Identity: id})
	if err != nil {
		f.t.Fatal(err)
	}
	cert, key, err := WriteIssued(f.dir, id, is)
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := LoadCredentials(filepath.Join(f.dir, CAFile), cert, key)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(f.ca.Cert)
	return p
}

func tlsCert(t *testing.T, is *Issued, chain ...*x509.Certificate) *tls.Certificate {
	t.Helper()
	c := &tls.Certificate{Certificate: [][]byte{is.Cert.Raw}, PrivateKey: is.Key, Leaf: is.Cert}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}

// selfSigned is a certificate claiming id, signed by its own key.
func selfSigned(t *testing.T, id Identity) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: id.Name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{id.URI()}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func TestIdentityRoundTrip(t *testing.T) {
	f := newFixture(t)
	for _, id := range []Identity{{Role: RoleServer, Name: "s0"}, {Role: RoleAgent, Name: "gpu-17.rack2"}, {Role: RoleClient, Name: "alice"}} {
		is, err := f.ca.Issue(CertRequest{Identity: id, Hosts: map[bool][]string{true: nil, false: {"10.1.2.3", "node.example"}}[id.Role == RoleClient]})
		if err != nil {
			t.Fatal(err)
		}
		got, err := IdentityOf(is.Cert)
		if err != nil || got != id {
			t.Errorf("IdentityOf = %v, %v; want %v", got, err, id)
		}
		if is.Cert.Subject.CommonName != id.Name || is.Cert.Subject.OrganizationalUnit[0] != string(id.Role) {
			t.Errorf("subject %v", is.Cert.Subject)
		}
		if id.Role == RoleClient {
			if len(is.Cert.IPAddresses)+len(is.Cert.DNSNames) != 0 || len(is.Cert.ExtKeyUsage) != 1 {
				t.Errorf("client certificate serves hosts or acts as a server: %v %v %v", is.Cert.IPAddresses, is.Cert.DNSNames, is.Cert.ExtKeyUsage)
			}
			continue
		}
		for _, h := range []string{"127.0.0.1", "localhost", "10.1.2.3", "node.example"} {
			if err := is.Cert.VerifyHostname(h); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}
		if is.Cert.NotAfter.After(f.ca.Cert.NotAfter) {
			t.Errorf("certificate outlives its CA")
		}
	}
}

func TestIssueRefusesBadInput(t *testing.T) {
	f := newFixture(t)
	for _, req := range []CertRequest{
		{Identity: Identity{Role: "admin", Name: "x"}},
		{Identity: Identity{Role: RoleServer, Name: ""}},
		{Identity: Identity{Role: RoleServer, Name: "a/b"}},
		{Identity: Identity{Role: RoleServer, Name: strings.Repeat("x", 64)}},
		{Identity: Identity{Role: RoleServer, Name: "s0"}, Hosts: []string{"not a host!"}},
		{Identity: Identity{Role: RoleClient, Name: "c"}, Hosts: []string{"10.0.0.1"}},
		{Identity: Identity{Role: RoleServer, Name: "s0"}, Validity: -time.Hour},
	} {
		if _, err := f.ca.Issue(req); !errors.Is(err, ErrBadName) {
			t.Errorf("Issue(%+v) = %v, want ErrBadName", req, err)
		}
	}
}

func TestFilesRefuseOverwriteAndMismatch(t *testing.T) {
	f := newFixture(t)
	if _, _, err := WriteCA(f.dir, f.ca); !errors.Is(err, ErrBadFile) {
		t.Errorf("second WriteCA = %v, want ErrBadFile", err)
	}
	ca, err := LoadCA(filepath.Join(f.dir, CAFile), filepath.Join(f.dir, CAKeyFile))
	if err != nil || !ca.Cert.Equal(f.ca.Cert) {
		t.Fatalf("LoadCA = %v", err)
	}
	if st, err := os.Stat(filepath.Join(f.dir, CAKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, %v", st.Mode(), err)
	}
	s0 := f.creds(Identity{Role: RoleServer, Name: "s0"})
	if s0.Identity != (Identity{Role: RoleServer, Name: "s0"}) {
		t.Errorf("identity %v", s0.Identity)
	}
	s0c, s0k := CertFiles(s0.Identity)
	a0 := f.creds(Identity{Role: RoleAgent, Name: "a0"})
	_, a0k := CertFiles(a0.Identity)
	ca2 := t.TempDir()
	if _, _, err := WriteCA(ca2, f.other); err != nil {
		t.Fatal(err)
	}
	exp, _ := f.ca.Issue(CertRequest{Identity: Identity{Role: RoleServer, Name: "old"}, NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour})
	expc, expk, _ := WriteIssued(f.dir, Identity{Role: RoleServer, Name: "old"}, exp)
	cases := []struct{ name, ca, cert, key string }{
		{"key of another certificate", filepath.Join(f.dir, CAFile), filepath.Join(f.dir, s0c), filepath.Join(f.dir, a0k)},
		{"another CA", filepath.Join(ca2, CAFile), filepath.Join(f.dir, s0c), filepath.Join(f.dir, s0k)},
		{"expired", filepath.Join(f.dir, CAFile), expc, expk},
		{"CA file is a leaf", filepath.Join(f.dir, s0c), filepath.Join(f.dir, s0c), filepath.Join(f.dir, s0k)},
		{"missing", filepath.Join(f.dir, "nope.pem"), filepath.Join(f.dir, s0c), filepath.Join(f.dir, s0k)},
		{"key as certificate", filepath.Join(f.dir, CAFile), filepath.Join(f.dir, s0k), filepath.Join(f.dir, s0k)},
	}
	for _, tc := range cases {
		if _, err := LoadCredentials(tc.ca, tc.cert, tc.key); err == nil {
			t.Errorf("%s: loaded", tc.name)
		} else if !errors.Is(err, ErrBadFile) && !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v wraps no sentinel", tc.name, err)
		}
	}
}

func TestAccepts(t *testing.T) {
	cases := []struct {
		ch     Channel
		me     Role
		dialer bool
		want   []Role // nil and err: refused
		err    bool
	}{
		{ChannelRaft, RoleServer, false, []Role{RoleServer}, false},
		{ChannelRaft, RoleServer, true, []Role{RoleServer}, false},
		{ChannelRaft, RoleAgent, false, nil, true},
		{ChannelRaft, RoleAgent, true, nil, true},
		{ChannelRaft, RoleClient, true, nil, true},
		{ChannelActor, RoleServer, false, []Role{RoleServer, RoleAgent}, false},
		{ChannelActor, RoleAgent, false, []Role{RoleServer}, false},
		{ChannelActor, RoleServer, true, []Role{RoleServer, RoleAgent}, false},
		{ChannelActor, RoleAgent, true, []Role{RoleServer}, false},
		{ChannelActor, RoleClient, true, nil, true},
		{ChannelAPI, RoleServer, false, Roles, false},
		{ChannelAPI, RoleAgent, false, nil, true},
		{ChannelReport, RoleServer, false, nil, true},
	}
	for _, tc := range cases {
		got, err := Accepts(tc.ch, tc.me, tc.dialer)
		if (err != nil) != tc.err || !equalRoles(got, tc.want) {
			t.Errorf("Accepts(%s, %s, dialer %v) = %v, %v; want %v (error %v)", tc.ch, tc.me, tc.dialer, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, ErrChannel) {
			t.Errorf("error %v is not ErrChannel", err)
		}
	}
}

func equalRoles(a, b []Role) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// serve runs a NewListener with cfg that writes "ok" on every accepted
// connection; it returns the address and the log.
func serve(t *testing.T, ch Channel, cfg *tls.Config, timeout time.Duration) (string, *logbuf.Buffer) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	ln := NewListener(inner, cfg, ListenerOptions{Channel: ch, Logger: slog.New(slog.NewTextHandler(logs, nil)), HandshakeTimeout: timeout})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	return ln.Addr().String(), logs
}

// dial connects with cfg (nil: plaintext) and reports whether the
// listener accepted the connection (answered "ok"), with the error.
func dial(addr string, cfg *tls.Config) (bool, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	var conn net.Conn = c
	if cfg == nil {
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return false, err
		}
	} else {
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = "127.0.0.1"
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			return false, err
		}
		conn = tc
	}
	b, err := io.ReadAll(conn)
	if string(b) == "ok" {
		return true, nil
	}
	if err == nil {
		err = errors.New("closed: " + string(b))
	}
	return false, err
}

// TestHandshakeMatrix connects to the listener of every channel with
// every kind of credential an attacker might hold and checks what the
// listener accepts, and that every refusal is one log line naming the
// peer.
func TestHandshakeMatrix(t *testing.T) {
	f := newFixture(t)
	server := f.creds(Identity{Role: RoleServer, Name: "s0"})
	agent := f.creds(Identity{Role: RoleAgent, Name: "a0"})
	client := f.creds(Identity{Role: RoleClient, Name: "c0"})
	otherIs, _ := f.other.Issue(CertRequest{Identity: Identity{Role: RoleServer, Name: "s0"}})
	expIs, _ := f.ca.Issue(CertRequest{Identity: Identity{Role: RoleServer, Name: "s9"}, NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour})
	peers := []struct {
		name string
		cert *tls.Certificate // nil: none
		none bool             // plaintext
	}{
		{"server", &server.Cert, false},
		{"agent", &agent.Cert, false},
		{"client", &client.Cert, false},
		{"no certificate", nil, false},
		{"plaintext", nil, true},
		{"self-signed server", selfSigned(t, Identity{Role: RoleServer, Name: "s0"}), false},
		{"expired server", tlsCert(t, expIs), false},
		{"another CA's server", tlsCert(t, otherIs), false},
	}
	listeners := []struct {
		name   string
		ch     Channel
		holder *Credentials
		accept []string
	}{
		{"raft port of a server", ChannelRaft, server, []string{"server"}},
		{"actor port of a server", ChannelActor, server, []string{"server", "agent"}},
		{"actor port of an agent", ChannelActor, agent, []string{"server"}},
		{"API of a server", ChannelAPI, server, []string{"server", "agent", "client", "no certificate"}},
		// Workers hold no certificate: the report port asks for none
		// and so accepts any TLS client (a later slice adds report
		// tokens).
		{"report port of an agent", ChannelReport, agent, []string{"server", "agent", "client", "no certificate", "self-signed server", "expired server", "another CA's server"}},
	}
	for _, l := range listeners {
		cfg, err := l.holder.ServerConfig(l.ch)
		if err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		addr, logs := serve(t, l.ch, cfg, 2*time.Second)
		for _, p := range peers {
			var ccfg *tls.Config
			if !p.none {
				ccfg = &tls.Config{RootCAs: f.pool(), ServerName: "127.0.0.1"}
				if p.cert != nil {
					ccfg.Certificates = []tls.Certificate{*p.cert}
				}
			}
			before := len(logs.Lines("refused connection"))
			ok, err := dial(addr, ccfg)
			want := false
			for _, a := range l.accept {
				want = want || a == p.name
			}
			if ok != want {
				t.Errorf("%s, %s: accepted %v (%v), want %v", l.name, p.name, ok, err, want)
				continue
			}
			if want {
				continue
			}
			// The refusal is logged once, naming the peer.
			poll.Wait(2*time.Second, func() bool { return len(logs.Lines("refused connection")) != before })
			lines := logs.Lines("refused connection")[before:]
			if len(lines) != 1 || !strings.Contains(lines[0], "peer=127.0.0.1:") || !strings.Contains(lines[0], "channel="+string(l.ch)) {
				t.Errorf("%s, %s: refusal log lines %q", l.name, p.name, lines)
			}
			if p.name == "agent" && l.ch == ChannelRaft && !strings.Contains(lines[0], "agent/a0") {
				t.Errorf("refusal of the agent does not name it: %s", lines[0])
			}
		}
	}
}

// TestDialersCheckThePeer: a dialer refuses a listener holding a
// certificate of a role that may not serve the channel, even one the CA
// signed.
func TestDialersCheckThePeer(t *testing.T) {
	f := newFixture(t)
	server := f.creds(Identity{Role: RoleServer, Name: "s0"})
	agent := f.creds(Identity{Role: RoleAgent, Name: "a0"})
	client := f.creds(Identity{Role: RoleClient, Name: "c0"})
	// Listeners that hold the wrong certificate but accept anyone.
	fake := func(c *Credentials) string {
		addr, _ := serve(t, "fake", &tls.Config{Certificates: []tls.Certificate{c.Cert}}, time.Second)
		return addr
	}
	raftClient, _ := server.ClientConfig(ChannelRaft)
	agentActor, _ := agent.ClientConfig(ChannelActor)
	serverActor, _ := server.ClientConfig(ChannelActor)
	cases := []struct {
		name string
		cfg  *tls.Config
		addr string
		want bool
	}{
		{"raft dialer reaches a server", raftClient, fake(server), true},
		{"raft dialer refuses an agent", raftClient, fake(agent), false},
		{"agent's actor dialer refuses an agent", agentActor, fake(agent), false},
		{"server's actor dialer reaches an agent", serverActor, fake(agent), true},
		{"API client refuses an agent", APIClient(f.pool(), nil), fake(agent), false},
		{"API client reaches a server", APIClient(f.pool(), nil), fake(server), true},
		{"worker refuses a server on the report port", ReportClient(f.pool()), fake(server), false},
		{"worker reaches an agent", ReportClient(f.pool()), fake(agent), true},
		// A client certificate cannot serve TLS at all (no serverAuth).
		{"API client refuses a client certificate", APIClient(f.pool(), nil), fake(client), false},
	}
	for _, tc := range cases {
		ok, err := dial(tc.addr, tc.cfg)
		if ok != tc.want {
			t.Errorf("%s: ok %v (%v), want %v", tc.name, ok, err, tc.want)
		}
		if !tc.want && err != nil && strings.Contains(tc.name, "agent") && !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: unclear error %v", tc.name, err)
		}
	}
	if _, err := client.ClientConfig(ChannelRaft); !errors.Is(err, ErrChannel) {
		t.Errorf("client ClientConfig(raft) = %v, want ErrChannel", err)
	}
	if _, err := agent.ServerConfig(ChannelAPI); !errors.Is(err, ErrChannel) {
		t.Errorf("agent ServerConfig(api) = %v, want ErrChannel", err)
	}
}

func TestListenerAnswersPlainHTTPAndTimesOutSilentPeers(t *testing.T) {
	f := newFixture(t)
	server := f.creds(Identity{Role: RoleServer, Name: "s0"})
	cfg, _ := server.ServerConfig(ChannelAPI)
	addr, logs := serve(t, ChannelAPI, cfg, 200*time.Millisecond)
	_, err := dial(addr, nil)
	if err == nil || !strings.Contains(err.Error(), "400 Bad Request") || !strings.Contains(err.Error(), "https") {
		t.Errorf("plaintext HTTP: %v, want a 400 saying to use https", err)
	}
	// A peer that connects and says nothing is dropped after the
	// handshake timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("silent peer: read %v after %v, want a close after about 200ms", err, time.Since(start))
	}
	poll.Wait(2*time.Second, func() bool { return len(logs.Lines("refused connection")) >= 2 })
	if n := len(logs.Lines("refused connection")); n != 2 {
		t.Errorf("%d refusal lines, want 2:\n%s", n, logs.String())
	}
}

func TestListenerCapsHandshakes(t *testing.T) {
	f := newFixture(t)
	server := f.creds(Identity{Role: RoleServer, Name: "s0"})
	cfg, _ := server.ServerConfig(ChannelRaft)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	ln := NewListener(inner, cfg, ListenerOptions{Channel: ChannelRaft, Logger: slog.New(slog.NewTextHandler(logs, nil)), MaxHandshakes: 2, HandshakeTimeout: 5 * time.Second})
	defer ln.Close()
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// Let the two silent peers take both handshake slots; a third
	// connection is closed at once.
	deadline := time.Now().Add(3 * time.Second)
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if errors.Is(err, syscall.ECONNRESET) {
			break // closed before the dial returned
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a third connection was not closed while two handshakes were pending")
		}
	}
	poll.Wait(2*time.Second, func() bool { return len(logs.Lines("too many TLS handshakes")) > 0 })
	if l := logs.Lines("too many TLS handshakes"); len(l) == 0 {
		t.Errorf("no log line for the overload:\n%s", logs.String())
	}
	// The real server still gets in once a slot frees.
	for _, c := range held {
		c.Close()
	}
	held = nil
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	rc, _ := server.ClientConfig(ChannelRaft)
	var last error
	if !poll.Wait(3*time.Second, func() bool {
		ok, err := dial(ln.Addr().String(), rc)
		last = err
		return ok
	}) {
		t.Fatalf("server not accepted after the slots freed: %v", last)
	}
}

func TestDevBundle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	b, err := DevBundle(dir, []string{"s0", "s1"}, []string{"a0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s0", "s1", "a0", DevClient} {
		c, err := b.Credentials(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Identity.Name != name {
			t.Errorf("%s: identity %v", name, c.Identity)
		}
	}
	flags := b.Flags("a0")
	if len(flags) != 8 || flags[0] != "--ca" || flags[6] != "--gossip-key" {
		t.Errorf("flags %v", flags)
	}
	if keys, err := b.GossipKeys(); err != nil || len(keys) != 1 || len(keys[0]) != 32 {
		t.Errorf("gossip keys %d, %v", len(keys), err)
	}
	if _, err := DevBundle(dir, []string{"s0"}, nil); err == nil {
		t.Error("a second bundle in the same directory")
	}
	if _, err := DevBundle(t.TempDir(), []string{"x"}, []string{"x"}); !errors.Is(err, ErrBadName) {
		t.Errorf("a name both server and agent: %v", err)
	}
}

// TestDevBundleHosts: certificates name the extra hosts of their process
// (and loopback), and only theirs; hosts of a name not in the bundle, or
// of the client, are refused.
func TestDevBundleHosts(t *testing.T) {
	b, err := DevBundleHosts(t.TempDir(), []string{"s0"}, []string{"a0"},
		map[string][]string{"s0": {"10.77.0.1"}, "a0": {"10.77.0.2", "a0.lab"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"s0": {"10.77.0.1", "127.0.0.1"}, "a0": {"10.77.0.2", "a0.lab", "localhost"}} {
		c, err := b.Credentials(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range want {
			if err := c.Cert.Leaf.VerifyHostname(h); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	if c, err := b.Credentials("s0"); err != nil || c.Cert.Leaf.VerifyHostname("10.77.0.2") == nil {
		t.Errorf("s0's certificate names a0's address (%v)", err)
	}
	for _, hosts := range []map[string][]string{{"s9": {"10.0.0.1"}}, {DevClient: {"10.0.0.1"}}, {"s0": {"not a host!"}}} {
		if _, err := DevBundleHosts(t.TempDir(), []string{"s0"}, nil, hosts); !errors.Is(err, ErrBadName) {
			t.Errorf("hosts %v: %v, want ErrBadName", hosts, err)
		}
	}
}

// TestBundleAdd: a certificate issued later by the bundle's CA is
// trusted with the others and names its extra hosts; a name already in
// the bundle is refused.
func TestBundleAdd(t *testing.T) {
	b, err := DevBundle(t.TempDir(), []string{"s0"}, []string{"a0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Add(RoleServer, "s9", []string{"10.77.0.9"}); err != nil {
		t.Fatal(err)
	}
	c, err := b.Credentials("s9")
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity != (Identity{Role: RoleServer, Name: "s9"}) || c.Cert.Leaf.VerifyHostname("10.77.0.9") != nil {
		t.Errorf("added certificate: %v", c.Identity)
	}
	if _, err := c.Cert.Leaf.Verify(x509.VerifyOptions{Roots: c.Pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("added certificate not of the bundle's CA: %v", err)
	}
	for _, name := range []string{"s0", "a0", DevClient, "s9"} {
		if err := b.Add(RoleServer, name, nil); !errors.Is(err, ErrBadName) {
			t.Errorf("adding %q again: %v, want ErrBadName", name, err)
		}
	}
}

// FuzzIdentityOf reads identities from URIs as a peer's (unverified)
// certificate may carry them: never a panic, and an accepted identity
// is valid and round-trips.
func FuzzIdentityOf(f *testing.F) {
	for _, s := range []string{"spiffe://pollux/server/s0", "spiffe://pollux/agent/a/b", "spiffe://pollux//", "spiffe://other/server/x", "spiffe://pollux/admin/root"} {
		f.Add(s, "")
	}
	f.Add("spiffe://pollux/agent/a1", "spiffe://pollux/server/s1")
	f.Fuzz(func(t *testing.T, a, b string) {
		var uris []*url.URL
		for _, s := range []string{a, b} {
			if u, err := url.Parse(s); err == nil && s != "" {
				uris = append(uris, u)
			}
		}
		id, err := IdentityOf(&x509.Certificate{URIs: uris})
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("error %v is not ErrRefused", err)
			}
			return
		}
		if id.Validate() != nil {
			t.Fatalf("accepted invalid %v", id)
		}
		back, err := IdentityOf(&x509.Certificate{URIs: []*url.URL{id.URI()}})
		if err != nil || back != id {
			t.Fatalf("%v does not round-trip: %v, %v", id, back, err)
		}
	})
}
