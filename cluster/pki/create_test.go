package pki_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"pollux/cluster/pki"
)

// TestCreateCAAndIssueTo: the tls commands' steps write their files
// once, never replace them, and write nothing for a bad request.
func TestCreateCAAndIssueTo(t *testing.T) {
	dir := t.TempDir()
	ca, certPath, keyPath, err := pki.CreateCA(dir, pki.CAOptions{CommonName: "lab CA"})
	if err != nil || ca.Cert.Subject.CommonName != "lab CA" || certPath != filepath.Join(dir, pki.CAFile) || keyPath != filepath.Join(dir, pki.CAKeyFile) {
		t.Fatalf("CreateCA: %v %s %s %v", ca, certPath, keyPath, err)
	}
	if _, _, _, err := pki.CreateCA(dir, pki.CAOptions{}); !errors.Is(err, pki.ErrBadFile) {
		t.Errorf("a second CA in the same directory: %v", err)
	}
	loaded, err := pki.LoadCA(certPath, keyPath)
	if err != nil || !loaded.Cert.Equal(ca.Cert) {
		t.Fatalf("loading the CA written: %v", err)
	}
	id := pki.Identity{Role: pki.RoleAgent, Name: "a1"}
	is, certPath, keyPath, err := loaded.IssueTo(dir, pki.CertRequest{Identity: id, Hosts: []string{"10.0.0.7"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.LoadCredentials(filepath.Join(dir, pki.CAFile), certPath, keyPath)
	if err != nil || c.Identity != id || !c.Cert.Leaf.Equal(is.Cert) {
		t.Errorf("credentials written: %+v, %v", c, err)
	}
	if _, _, _, err := loaded.IssueTo(dir, pki.CertRequest{Identity: id}); !errors.Is(err, pki.ErrBadFile) {
		t.Errorf("issuing a1 again: %v", err)
	}
	bad := pki.Identity{Role: pki.RoleAgent, Name: "a/b"}
	if _, _, _, err := loaded.IssueTo(dir, pki.CertRequest{Identity: bad}); !errors.Is(err, pki.ErrBadName) {
		t.Errorf("a bad name: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("files in the directory: %v, want the CA's two and a1's two", entries)
	}
}

// A new cluster's CA and a server's certificate, as pollux tls ca create
// and pollux tls cert create make them.
func ExampleCreateCA() {
	dir, err := os.MkdirTemp("", "pki-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ca, caCert, _, err := pki.CreateCA(dir, pki.CAOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, cert, key, err := ca.IssueTo(dir, pki.CertRequest{Identity: pki.Identity{Role: pki.RoleServer, Name: "s1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(filepath.Base(caCert), filepath.Base(cert), filepath.Base(key))
	// Output:
	// pollux-ca.pem server-s1.pem server-s1-key.pem
}
