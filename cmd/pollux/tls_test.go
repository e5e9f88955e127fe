package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pollux/cluster"
	"pollux/cluster/pki"
)

// runOut runs pollux args and returns its exit code and stdout.
func runOut(args ...string) (int, string) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		if _, ok := err.(usageError); ok {
			return 2, out.String() + err.Error()
		}
		return 1, out.String() + err.Error()
	}
	return 0, out.String()
}

func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	if code, out := runOut("tls", "ca", "create", "--dir", dir); code != 0 || !strings.Contains(out, "fingerprint") {
		t.Fatalf("ca create: %d %s", code, out)
	}
	if code, out := runOut("tls", "ca", "create", "--dir", dir); code != 2 || !strings.Contains(out, "exists") {
		t.Errorf("second ca create: %d %s", code, out)
	}
	if code, out := runOut("tls", "cert", "create", "--role", "server", "--name", "s0", "--host", "10.0.0.7", "--host", "s0.lab", "--dir", dir); code != 0 || !strings.Contains(out, "10.0.0.7") {
		t.Fatalf("cert create: %d %s", code, out)
	}
	c, err := pki.LoadCredentials(filepath.Join(dir, pki.CAFile), filepath.Join(dir, "server-s0.pem"), filepath.Join(dir, "server-s0-key.pem"))
	if err != nil || c.Identity != (pki.Identity{Role: pki.RoleServer, Name: "s0"}) || c.Cert.Leaf.VerifyHostname("s0.lab") != nil {
		t.Errorf("created credentials: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"--role", "admin", "--name", "x"},
		{"--role", "agent", "--name", "a/b"},
		{"--role", "client", "--name", "c", "--host", "1.2.3.4"},
		{"--role", "agent", "--name", "a", "--days", "0"},
		{"--role", "server", "--name", "s0"}, // exists
		{"--role", "agent"},                  // no name
	} {
		if code, out := runOut(append([]string{"tls", "cert", "create", "--dir", dir}, bad...)...); code != 2 {
			t.Errorf("cert create %v: %d %s, want 2", bad, code, out)
		}
	}
	if code, out := runOut("tls", "cert", "create", "--role", "agent", "--name", "a0", "--dir", t.TempDir()); code != 2 || !strings.Contains(out, "tls ca create") {
		t.Errorf("cert create without a CA: %d %s", code, out)
	}
	code, out := runOut("keygen")
	if code != 0 {
		t.Fatal(out)
	}
	if keys, err := cluster.ParseKeys([]byte(out)); err != nil || len(keys) != 1 || len(keys[0]) != cluster.KeySize {
		t.Errorf("keygen printed %q: %v", out, err)
	}
}

// testServer is the name of the test process's own server identity (its
// gossip member and actor system).
const testServer = "test-server"

// testBundleDir holds testBundle's files; TestMain removes it.
var testBundleDir string

// testBundle is the CA, certificates and gossip key of the clusters the
// tests of this package start themselves (a launcher makes its own).
var testBundle = sync.OnceValue(func() *pki.Bundle {
	dir, err := os.MkdirTemp("", "pollux-test-tls-")
	if err != nil {
		panic(err)
	}
	testBundleDir = dir
	b, err := pki.DevBundle(dir, []string{testServer}, []string{"a1", "a2", "a3", "a4"})
	if err != nil {
		panic(err)
	}
	return b
})

func TestMain(m *testing.M) {
	code := m.Run()
	if testBundleDir != "" {
		os.RemoveAll(testBundleDir)
	}
	os.Exit(code)
}
