package pki

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRenew: a certificate renewed in place is shown on the connections
// made after Renew; one of another identity or CA is refused and the
// old one stays.
func TestRenew(t *testing.T) {
	f := newFixture(t)
	id := Identity{Role: RoleServer, Name: "s0"}
	srv := f.creds(id)
	cli := f.creds(Identity{Role: RoleServer, Name: "s1"})
	cfg, err := srv.ServerConfig(ChannelRaft)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		t.Helper()
		cc, err := cli.ClientConfig(ChannelRaft)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		cc.VerifyConnection = func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0].SerialNumber.String()
			return nil
		}
		addr, _ := serve(t, ChannelRaft, cfg, 0)
		if ok, err := dial(addr, cc); !ok {
			t.Fatalf("dial: %v", err)
		}
		return got
	}
	before := serial()
	replace := func(ca *CA, id Identity) {
		t.Helper()
		is, err := ca.Issue(CertRequest{Identity: id})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cert, key, err := WriteIssued(dir, id, is)
		if err != nil {
			t.Fatal(err)
		}
		for from, to := range map[string]string{cert: srv.certPath, key: srv.keyPath} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Clean(to), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, bad := range map[string]func(){
		"another identity": func() { replace(f.ca, Identity{Role: RoleServer, Name: "s9"}) },
		"another CA":       func() { replace(f.other, id) },
	} {
		bad()
		if _, err := srv.Renew(); err == nil {
			t.Errorf("%s: renewed", name)
		}
		if got := serial(); got != before {
			t.Errorf("%s: serving %s after a refused renewal, want %s", name, got, before)
		}
	}
	replace(f.ca, id)
	if _, err := srv.Renew(); err != nil {
		t.Fatal(err)
	}
	if after := serial(); after == before {
		t.Errorf("still serving certificate %s after Renew", before)
	}
	if _, err := (&Credentials{}).Renew(); !errors.Is(err, ErrBadFile) {
		t.Errorf("renewing credentials not from files: %v", err)
	}
}
