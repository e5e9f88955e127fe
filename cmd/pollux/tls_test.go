package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pollux/actors/agent"
	"pollux/actors/server"
	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/testbed/launch"
)

// runOut runs pollux args and returns its exit code and stdout.
func runOut(args ...string) (int, string) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		return exitCode(err), out.String() + err.Error()
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
	// A server of a lab in a federation: its cluster in the identity.
	if code, out := runOut("tls", "cert", "create", "--role", "server", "--name", "s1", "--cluster", "lab-a", "--dir", dir); code != 0 || !strings.Contains(out, "spiffe://lab-a/server/s1") {
		t.Fatalf("cert create --cluster: %d %s", code, out)
	}
	if c, err := pki.LoadCredentials(filepath.Join(dir, pki.CAFile), filepath.Join(dir, "server-s1.pem"), filepath.Join(dir, "server-s1-key.pem")); err != nil ||
		c.Identity != (pki.Identity{Role: pki.RoleServer, Name: "s1", Cluster: "lab-a"}) {
		t.Errorf("created credentials of lab-a: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"--role", "server", "--name", "s2", "--cluster", "pollux"},
		{"--role", "server", "--name", "s2", "--cluster", "lab a"},
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
	b, err := pki.DevBundle(dir, []string{testServer, "ts0"}, []string{"a1", "a2", "a3", "a4", "a5", "a6", "cpu1"})
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

// startProc runs `pollux ARGS` as a subprocess with its log in stderr and
// a TMPDIR of its own, and returns it with its ready line; it is killed
// at cleanup.
func startProc(t *testing.T, stderr io.Writer, args ...string) (*exec.Cmd, []byte) {
	t.Helper()
	full := append(slices.Clone(selfExec), args...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1", "TMPDIR="+procTempDir(t))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan []byte, 1) // nil: stdout closed without a line
	go func() {
		sc := bufio.NewScanner(out)
		var line []byte
		if sc.Scan() {
			line = slices.Clone(sc.Bytes())
		}
		ready <- line
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-ready:
		if line == nil {
			err := cmd.Wait() // stdout is at its end: the process exited
			t.Fatalf("%v exited before its ready line (%v)%s", args[:1], err, logTail(stderr))
		}
		return cmd, line
	case <-time.After(60 * time.Second):
		t.Fatalf("%v not ready within 60 s%s", args[:1], logTail(stderr))
	}
	return nil, nil
}

// logTail is the last lines of a process's log, if its sink can say
// them (a logbuf.Buffer), for the message of a test that failed on it.
func logTail(sink io.Writer) string {
	s, ok := sink.(fmt.Stringer)
	if !ok {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s.String(), "\n"), "\n")
	return "; its log ends:\n" + strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// attacker holds the certificates an outsider might try: the cluster's
// own (of the wrong role), a self-signed one claiming to be a server, an
// expired one of the cluster CA, and one of another CA.
type attacker struct {
	agent, client, server        tls.Certificate
	selfSigned, expired, otherCA tls.Certificate
	pool                         *x509.CertPool
}

func newAttacker(t *testing.T, b *pki.Bundle) *attacker {
	t.Helper()
	a := &attacker{}
	for name, dst := range map[string]*tls.Certificate{"a4": &a.agent, pki.DevClient: &a.client, testServer: &a.server} {
		c, err := b.Credentials(name)
		if err != nil {
			t.Fatal(err)
		}
		*dst, a.pool = c.Cert, c.Pool
	}
	issued := func(ca *pki.CA, req pki.CertRequest) tls.Certificate {
		is, err := ca.Issue(req)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{is.Cert.Raw}, PrivateKey: is.Key, Leaf: is.Cert}
	}
	ca, err := pki.LoadCA(b.CA, filepath.Join(b.Dir, pki.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	srvID := pki.Identity{Role: pki.RoleServer, Name: "ts0"}
	a.expired = issued(ca, pki.CertRequest{Identity: srvID, NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour})
	other, err := pki.NewCA(pki.CAOptions{CommonName: "another CA"})
	if err != nil {
		t.Fatal(err)
	}
	a.otherCA = issued(other, pki.CertRequest{Identity: srvID})
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ts0"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{srvID.URI()}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	a.selfSigned = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return a
}

// probe connects to addr as cert (nil: no certificate; plain: no TLS),
// writes payload and reads: it returns the local address (what the
// process logs as the peer) and whether the process accepted the
// connection (a TLS alert or a closed plaintext connection is a refusal;
// an answer or a wait for more is an acceptance).
func probe(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate, plain bool, payload []byte) (string, bool, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	local := c.LocalAddr().String()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var conn net.Conn = c
	if !plain {
		cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			return local, false, err
		}
		conn = tc
	}
	if _, err := conn.Write(payload); err != nil {
		return local, false, err
	}
	n, err := conn.Read(make([]byte, 512))
	if n > 0 && !plain {
		return local, true, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return local, !plain, nil
	}
	return local, false, err
}

// TestSecurePortsRefuseStrangers starts a real server and agent with TLS
// and gossip keys and tries every port with every wrong credential: each
// attempt is refused (a clear error for the client), logged once by the
// process naming the peer's address, changes nothing, and crashes
// nothing. The right credentials get in.
func TestSecurePortsRefuseStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server and agent processes")
	}
	b := testBundle()
	att := newAttacker(t, b)
	ports, err := launch.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	var srvLog, agentLog logbuf.Buffer
	srv, line := startProc(t, &srvLog, append([]string{"server", "--id", "ts0", "--data-dir", t.TempDir(), "--raft", raftAddr,
		"--http", httpAddr, "--peers", "ts0=" + raftAddr + "=" + httpAddr, "--bootstrap", "--fast-gossip", "--interval", "500ms", "--log-level", "warn"},
		b.Flags("ts0")...)...)
	var sr server.Ready
	if err := json.Unmarshal(line, &sr); err != nil {
		t.Fatal(err)
	}
	token := bootstrapTokens(t, httpAddr)
	var ar agent.Ready // (before the variable agent hides the package)
	agent, line := startProc(t, &agentLog, append([]string{"agent", "--name", "a3", "--gpus", "2", "--fast-gossip", "--log-level", "warn",
		"--join", sr.Gossip, "--worker-exec", strings.Join(selfExec, ",")}, append(b.Flags("a3"), rootRunAs(nil)...)...)...)
	if err := json.Unmarshal(line, &ar); err != nil {
		t.Fatal(err)
	}
	// The server reaches the agent over TLS: it registers its GPUs.
	waitStatus := func(what string, ok func(api.Status) bool) api.Status {
		t.Helper()
		var st api.Status
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out := runOut("status", "--server", httpAddr, "--ca", b.CA, "--token", token, "--json")
			if code == 0 && json.Unmarshal([]byte(out), &st) == nil && ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last status %d %s\nserver log:\n%s\nagent log:\n%s", what, code, out, srvLog.String(), agentLog.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	before := waitStatus("agent registered", func(s api.Status) bool { return s.GPUs == 2 && s.Leader == "ts0" })

	h2 := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	get := []byte("GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
	forward := []byte{2, 0, 0, 0, 5, 1, 1, 4, 1, 7} // a forwarded write (type byte 2, one frame)
	type attempt struct {
		name    string
		log     *logbuf.Buffer
		addr    string
		cert    *tls.Certificate
		plain   bool
		payload []byte
		accept  bool
	}
	attempts := []attempt{
		{"raft: plaintext", &srvLog, raftAddr, nil, true, append([]byte{1}, make([]byte, 64)...), false},
		{"raft: agent certificate", &srvLog, raftAddr, &att.agent, false, []byte{1, 0, 0, 0}, false},
		{"raft: client certificate forwarding", &srvLog, raftAddr, &att.client, false, forward, false},
		{"raft: agent certificate forwarding", &srvLog, raftAddr, &att.agent, false, forward, false},
		{"raft: self-signed server", &srvLog, raftAddr, &att.selfSigned, false, forward, false},
		{"raft: expired server", &srvLog, raftAddr, &att.expired, false, forward, false},
		{"raft: another CA's server", &srvLog, raftAddr, &att.otherCA, false, forward, false},
		{"raft: no certificate", &srvLog, raftAddr, nil, false, forward, false},
		{"raft: server certificate", &srvLog, raftAddr, &att.server, false, []byte{1}, true},
		{"server actor: plaintext gRPC", &srvLog, sr.Actor, nil, true, h2, false},
		{"server actor: client certificate", &srvLog, sr.Actor, &att.client, false, h2, false},
		{"server actor: another CA", &srvLog, sr.Actor, &att.otherCA, false, h2, false},
		{"server actor: expired", &srvLog, sr.Actor, &att.expired, false, h2, false},
		{"server actor: agent certificate", &srvLog, sr.Actor, &att.agent, false, h2, true},
		{"API: plaintext HTTP", &srvLog, httpAddr, nil, true, get, false},
		{"API: another CA's certificate", &srvLog, httpAddr, &att.otherCA, false, get, false},
		{"API: expired certificate", &srvLog, httpAddr, &att.expired, false, get, false},
		{"API: self-signed certificate", &srvLog, httpAddr, &att.selfSigned, false, get, false},
		{"API: no certificate", &srvLog, httpAddr, nil, false, get, true},
		{"API: agent certificate", &srvLog, httpAddr, &att.agent, false, get, true},
		{"agent actor: plaintext gRPC", &agentLog, ar.Actor, nil, true, h2, false},
		{"agent actor: another agent's certificate", &agentLog, ar.Actor, &att.agent, false, h2, false},
		{"agent actor: client certificate", &agentLog, ar.Actor, &att.client, false, h2, false},
		{"agent actor: self-signed server", &agentLog, ar.Actor, &att.selfSigned, false, h2, false},
		{"agent actor: server certificate", &agentLog, ar.Actor, &att.server, false, h2, true},
		{"reports: plaintext", &agentLog, ar.Reports, nil, true, []byte(`{"job":"x","incarnation":1,"rank":0,"step_time":1,"local_bsz":1,"done":true}` + "\n"), false},
	}
	for _, a := range attempts {
		local, ok, err := probe(t, a.addr, att.pool, a.cert, a.plain, a.payload)
		if ok != a.accept {
			t.Errorf("%s: accepted %v (%v), want %v", a.name, ok, err, a.accept)
			continue
		}
		if a.accept {
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(a.log.Lines("peer="+local)) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if lines := a.log.Lines("peer=" + local); len(lines) != 1 || !strings.Contains(lines[0], "refused") {
			t.Errorf("%s: log lines naming the peer %s: %q", a.name, local, lines)
		} else {
			t.Logf("%s: client: %v; log: %s", a.name, err, lines[0])
		}
	}

	// Gossip: members without the key, or with another, cannot join.
	other, _ := cluster.NewKey()
	otherKeys, _ := cluster.ParseKeys([]byte(other))
	for name, keys := range map[string][][]byte{"no key": nil, "another key": otherKeys} {
		m, err := cluster.Start(cluster.Config{Name: "intruder", Fast: true, Keys: keys, Logger: slog.New(slog.DiscardHandler),
			Meta: cluster.Meta{Role: cluster.RoleAgent, GPUs: 64}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Join([]string{sr.Gossip}); err == nil {
			t.Errorf("gossip with %s joined", name)
		}
		m.Shutdown()
	}

	// Client commands: the CA is needed and named when missing.
	if code, out := runOut("status", "--server", httpAddr, "--timeout", "3s", "--ca", "", "--token", token); code == 0 || !strings.Contains(out, "--ca") {
		t.Errorf("status without the CA: %d %s", code, out)
	}
	if code, out := runOut("status", "--server", "http://"+httpAddr, "--timeout", "3s", "--token", token); code == 0 || !strings.Contains(out, "400") {
		t.Errorf("status over plaintext: %d %s", code, out)
	}

	// Nothing changed, nothing crashed. (The allocation generation moves
	// on with every round, attacks or not; the term moves only with an
	// election, which a forged message must not cause.)
	after := waitStatus("after the attacks", func(api.Status) bool { return true })
	if after.GPUs != before.GPUs || after.Term != before.Term || after.Leader != before.Leader || len(after.Jobs) != 0 {
		t.Errorf("state changed: before %+v, after %+v", before, after)
	}
	for name, p := range map[string]*exec.Cmd{"server": srv, "agent": agent} {
		if p.ProcessState != nil {
			t.Errorf("%s exited: %v", name, p.ProcessState)
		}
	}
}

// TestGossipKeyReloadOnSIGHUP: an agent re-reads its gossip key file on
// SIGHUP; a member holding only the new key gets in once the agent sends
// with it and not before, and a bad file changes nothing.
func TestGossipKeyReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent process")
	}
	b := testBundle()
	oldKey, _ := cluster.NewKey()
	newKey, _ := cluster.NewKey()
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte(oldKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := b.Flags("a2")
	flags[len(flags)-1] = keyFile
	var log logbuf.Buffer
	var ar agent.Ready // (before the variable agent hides the package)
	agent, line := startProc(t, &log, append([]string{"agent", "--name", "a2", "--gpus", "1", "--fast-gossip", "--log-level", "info",
		"--worker-exec", strings.Join(selfExec, ",")}, append(flags, rootRunAs(nil)...)...)...)
	if err := json.Unmarshal(line, &ar); err != nil {
		t.Fatal(err)
	}
	var joinWith func([][]byte) error
	joins := 0
	newKeys, _ := cluster.ParseKeys([]byte(newKey))
	oldKeys, _ := cluster.ParseKeys([]byte(oldKey))
	join := func() error { return joinWith(newKeys) }
	joinWith = func(keys [][]byte) error {
		joins++
		m, err := cluster.Start(cluster.Config{Name: fmt.Sprintf("newcomer-%d", joins), Fast: true, Keys: keys, Logger: slog.New(slog.DiscardHandler),
			Meta: cluster.Meta{Role: cluster.RoleServer}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Shutdown()
		_, err = m.Join([]string{ar.Gossip})
		return err
	}
	if join() == nil {
		t.Fatal("a member with a key the agent does not have joined")
	}
	hup := func(content string, wantLog string) {
		t.Helper()
		if err := os.WriteFile(keyFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		n := len(log.Lines(wantLog))
		if err := agent.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(log.Lines(wantLog)) == n {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", wantLog, log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	hup("not a key\n", "gossip keys not reloaded")
	if err := joinWith(oldKeys); err != nil {
		t.Fatalf("a bad key file changed the keys: %v", err)
	}
	// Step 1: the new key is accepted but the agent still sends with
	// the old one, which the newcomer cannot read.
	hup(oldKey+"\n"+newKey+"\n", "gossip keys installed")
	if join() == nil {
		t.Error("joined while the agent sends with the old key")
	}
	// Step 2: the agent sends with the new key.
	hup(newKey+"\n"+oldKey+"\n", "gossip keys installed")
	if err := join(); err != nil {
		t.Errorf("after making the new key primary: %v", err)
	}
	if agent.ProcessState != nil {
		t.Errorf("agent exited: %v", agent.ProcessState)
	}
}
