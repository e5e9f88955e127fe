package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lab is one cluster of a federation: its CA and a server's credentials.
type lab struct {
	ca    *CA
	creds *Credentials
}

func newLab(t *testing.T, name string) lab {
	t.Helper()
	ca, err := NewCA(CAOptions{CommonName: name + " CA"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, _, err := WriteCA(dir, ca); err != nil {
		t.Fatal(err)
	}
	id := Identity{Role: RoleServer, Name: "s0", Cluster: name}
	is, err := ca.Issue(CertRequest{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := WriteIssued(dir, id, is)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCredentials(filepath.Join(dir, CAFile), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity != id || id.URI().String() != "spiffe://"+name+"/server/s0" {
		t.Fatalf("identity %v (%s), want %v", c.Identity, id.URI(), id)
	}
	return lab{ca: ca, creds: c}
}

func (l lab) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(l.ca.Cert)
	return p
}

// issue makes credentials of id under l's CA, in memory.
func (l lab) issue(t *testing.T, id Identity) *Credentials {
	t.Helper()
	is, err := l.ca.Issue(CertRequest{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	return &Credentials{Pool: l.pool(), Cert: *tlsCert(t, is), Identity: id, NotAfter: is.Cert.NotAfter}
}

// TestFederationChannel: a lab's federation listener lets in a peer's
// server with its own CA, tells its cluster and CA to the handler, and
// refuses (logging the claimed identity) a peer using another peer's
// CA, a cluster that is no peer, a certificate naming no cluster, an
// agent, and its own cluster's CA passing for a peer.
func TestFederationChannel(t *testing.T) {
	a, b, c := newLab(t, "lab-a"), newLab(t, "lab-b"), newLab(t, "lab-c")
	pools := func(name string) (*x509.CertPool, bool) {
		switch name {
		case "lab-b":
			return b.pool(), true
		case "lab-c":
			return c.pool(), true
		}
		return nil, false
	}
	srv, err := a.creds.FederationServerConfig(pools)
	if err != nil {
		t.Fatal(err)
	}
	addr, logs := serve(t, ChannelFederation, srv, time.Second)
	dialAs := func(who *Credentials) (bool, error) {
		cfg, err := who.FederationClientConfig("lab-a", a.pool())
		if err != nil {
			t.Fatal(err)
		}
		return dial(addr, cfg)
	}
	if ok, err := dialAs(b.creds); !ok {
		t.Fatalf("lab-b's server refused: %v", err)
	}
	impostor := c.issue(t, Identity{Role: RoleServer, Name: "s0", Cluster: "lab-b"})
	stranger := newLab(t, "lab-x")
	noCluster := b.issue(t, Identity{Role: RoleServer, Name: "s1"})
	agent := b.issue(t, Identity{Role: RoleAgent, Name: "a0", Cluster: "lab-b"})
	self := a.issue(t, Identity{Role: RoleServer, Name: "s9", Cluster: "lab-b"})
	for name, who := range map[string]*Credentials{"lab-c's CA passing for lab-b": impostor, "a cluster that is no peer": stranger.creds,
		"a lab's own CA passing for a peer": self} {
		if ok, _ := dialAs(who); ok {
			t.Errorf("%s let in", name)
		}
	}
	// Certificates the dialer cannot use on the channel at all.
	for name, who := range map[string]*Credentials{"no cluster": noCluster, "an agent": agent} {
		if _, err := who.FederationClientConfig("lab-a", a.pool()); !errors.Is(err, ErrChannel) {
			t.Errorf("%s: FederationClientConfig %v, want ErrChannel", name, err)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{who.Cert}, RootCAs: a.pool()}
		if ok, _ := dial(addr, cfg); ok {
			t.Errorf("%s let in", name)
		}
	}
	text := logs.String()
	for _, want := range []string{"lab-b/server/s0", "lab-x/server/s0", "not a peer", "names no cluster", "lab-b/agent/a0"} {
		if !strings.Contains(text, want) {
			t.Errorf("refusal log does not mention %q:\n%s", want, text)
		}
	}
	// The handler's view: the peer and the CA that verified it.
	id, fp, err := FederationPeer([]*x509.Certificate{b.creds.Cert.Leaf}, pools, x509.ExtKeyUsageClientAuth, time.Now())
	if err != nil || id.ClusterName() != "lab-b" || fp != Fingerprint(b.ca.Cert) {
		t.Errorf("FederationPeer = %v, %s, %v", id, fp, err)
	}
	// A dialer refuses a listener of the wrong cluster.
	fakeB, _ := serve(t, "fake", &tls.Config{Certificates: []tls.Certificate{b.creds.Cert}}, time.Second)
	cfg, _ := c.creds.FederationClientConfig("lab-a", a.pool())
	if ok, _ := dial(fakeB, cfg); ok {
		t.Error("a dialer of lab-a reached lab-b's server")
	}
	if _, err := a.creds.ServerConfig(ChannelFederation); !errors.Is(err, ErrChannel) {
		t.Errorf("ServerConfig(federation) = %v", err)
	}
}

func TestClusterInIdentity(t *testing.T) {
	for _, bad := range []string{"pollux", "a/b", "-x", strings.Repeat("x", 64)} {
		if err := (Identity{Role: RoleServer, Name: "s0", Cluster: bad}).Validate(); !errors.Is(err, ErrBadName) {
			t.Errorf("cluster %q: %v", bad, err)
		}
	}
	f := newFixture(t)
	old := f.creds(Identity{Role: RoleServer, Name: "s0"})
	if old.Identity.Cluster != "" || old.Identity.ClusterName() != DefaultCluster || old.Identity.URI().String() != "spiffe://pollux/server/s0" {
		t.Errorf("identity without a cluster: %+v %s", old.Identity, old.Identity.URI())
	}
}
