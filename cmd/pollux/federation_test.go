package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/actors/fedlink"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/testbed/launch"
)

// runPollux runs `pollux ARGS` to its end (within 60 s) and returns its
// exit status and stderr.
func runPollux(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append(slices.Clone(selfExec), args...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	_ = cmd.Run()
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// labServer are the flags of a one-server lab named cluster in dir.
func labServer(t *testing.T, dir string, b *pki.Bundle, extra ...string) []string {
	t.Helper()
	ports, err := launch.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := []string{"server", "--id", "ts0", "--data-dir", filepath.Join(dir, "ts0"), "--raft", raftAddr, "--http", httpAddr,
		"--peers", "ts0=" + raftAddr + "=" + httpAddr, "--bootstrap", "--checkpoint-root", filepath.Join(dir, "ckpt"), "--log-level", "info"}
	return append(append(args, b.Flags("ts0")...), extra...)
}

func TestServerFederationBadInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	b := testBundle()
	fedFile := filepath.Join(dir, "fed.json")
	if err := os.WriteFile(fedFile, []byte(`{"quota": {}, "peers": [{"name": "lab-b", "addresses": ["127.0.0.1:1"], "ca_file": "`+b.CA+`"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		extra []string
		says  string
	}{
		{"federation without a name", []string{"--federation", fedFile, "--federation-addr", "127.0.0.1:0"}, "--federation needs --cluster"},
		{"federation without an address", []string{"--cluster", "lab-a", "--federation", fedFile}, "--federation needs --federation-addr"},
		{"a bad name", []string{"--cluster", "lab a"}, "--cluster \"lab a\""},
		{"the default trust domain", []string{"--cluster", "pollux"}, "trust domain"},
		{"a missing file", []string{"--cluster", "lab-a", "--federation", filepath.Join(dir, "nope.json"), "--federation-addr", "127.0.0.1:0"}, "bad federation file"},
		// The test bundle's certificate names no cluster.
		{"a certificate of no cluster", []string{"--cluster", "lab-a", "--federation", fedFile, "--federation-addr", "127.0.0.1:0"}, "want lab-a/server/ts0"},
		{"a gossip port without a key", []string{"--cluster", "lab-a", "--federation", fedFile, "--federation-addr", "127.0.0.1:0", "--federation-gossip-port", "7999"},
			"--federation-gossip-port needs --federation-gossip-key"},
	} {
		code, stderr := runPollux(t, labServer(t, dir, b, tc.extra...)...)
		if code != 2 || !strings.Contains(stderr, tc.says) {
			t.Errorf("%s: exit %d, want 2 saying %q:\n%s", tc.name, code, tc.says, stderr)
		}
	}
	// The federation's gossip key must not be the lab's.
	lab, err := pki.DevLabBundle(filepath.Join(dir, "lab"), "lab-a", []string{"ts0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, stderr := runPollux(t, labServer(t, filepath.Join(dir, "lab"), lab, "--cluster", "lab-a", "--federation", fedFile,
		"--federation-addr", "127.0.0.1:0", "--federation-gossip-key", lab.GossipKey)...)
	if code != 2 || !strings.Contains(stderr, "shares a key with --gossip-key") {
		t.Errorf("the lab's gossip key as the federation's: exit %d\n%s", code, stderr)
	}
}

// A cluster's name is written once: the server started again with
// another name refuses to run (exit status 2) and says the cluster's.
func TestServerClusterNameOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	args := labServer(t, dir, testBundle(), "--cluster", "lab-a")
	var log logbuf.Buffer
	first, _ := startProc(t, &log, args...)
	deadline := time.Now().Add(60 * time.Second)
	for len(log.Lines("server: federation identity", "cluster=lab-a")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster was never named:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGTERM)
	if err := first.Wait(); err != nil {
		t.Fatalf("first server: %v\n%s", err, log.String())
	}
	renamed := slices.Clone(args)
	renamed[len(renamed)-1] = "lab-z"
	code, stderr := runPollux(t, renamed...)
	if code != 2 || !strings.Contains(strings.ReplaceAll(stderr, `"`, ""), "this cluster is named lab-a") {
		t.Fatalf("restarted as lab-z: exit %d\n%s", code, stderr)
	}
	// The same name runs again.
	var again logbuf.Buffer
	second, _ := startProc(t, &again, args...)
	deadline = time.Now().Add(60 * time.Second)
	for len(again.Lines("server: federation identity", "cluster=lab-a")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster's own name refused:\n%s", again.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = second.Process.Signal(syscall.SIGTERM)
	_ = second.Wait()
}

// Two labs, each one server with its own CA, exchange bids over the
// federation channel (mutual TLS, each checking the other's CA), and
// one notices the other's loss (SIGKILL) within three intervals.
//
// With the federation's gossip pool (a key of its own), the labs also
// meet there, and the loss is noticed by either detector.
func TestFederatedServers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	for _, gossip := range []bool{false, true} {
		t.Run(fmt.Sprintf("gossip=%v", gossip), func(t *testing.T) { federatedServers(t, gossip) })
	}
}

func federatedServers(t *testing.T, gossip bool) {
	dir := t.TempDir()
	names := []string{"lab-a", "lab-b"}
	bundles := map[string]*pki.Bundle{}
	addrs := map[string]string{}
	ports, err := launch.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	gossipAddr := map[string]string{"lab-a": fmt.Sprintf("127.0.0.1:%d", ports[2]), "lab-b": fmt.Sprintf("127.0.0.1:%d", ports[3])}
	wanKey := filepath.Join(dir, "federation-gossip.key")
	key, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wanKey, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		b, err := pki.DevLabBundle(filepath.Join(dir, n, "tls"), n, []string{"ts0"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		bundles[n], addrs[n] = b, fmt.Sprintf("127.0.0.1:%d", ports[i])
	}
	const interval = 300 * time.Millisecond
	procs, logs := map[string]*exec.Cmd{}, map[string]*logbuf.Buffer{}
	for _, n := range names {
		other := names[0]
		if other == n {
			other = names[1]
		}
		f := fedlink.File{Peers: []fedlink.PeerFile{{Name: other, Addresses: []string{addrs[other]}, CAFile: bundles[other].CA}}}
		extra := []string{"--cluster", n, "--federation-addr", addrs[n], "--federation-interval", interval.String()}
		if gossip {
			f.Peers[0].Gossip = []string{gossipAddr[other]}
			extra = append(extra, "--federation-gossip-key", wanKey, "--federation-gossip-port", strings.TrimPrefix(gossipAddr[n], "127.0.0.1:"))
		}
		raw, _ := json.Marshal(f)
		fedFile := filepath.Join(dir, n, "federation.json")
		if err := os.WriteFile(fedFile, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		logs[n] = &logbuf.Buffer{}
		var ready []byte
		procs[n], ready = startProc(t, logs[n], labServer(t, filepath.Join(dir, n), bundles[n], append(extra, "--federation", fedFile)...)...)
		if gossip && !strings.Contains(string(ready), `"federation_gossip":"`+gossipAddr[n]+`"`) {
			t.Errorf("%s's ready line %s does not give its federation gossip address", n, ready)
		}
		if !strings.Contains(string(ready), `"federation":"`+addrs[n]+`"`) {
			t.Errorf("%s's ready line %s does not give its federation address", n, ready)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(logs["lab-a"].Lines("federation: peer up", "peer=lab-b")) == 0 || len(logs["lab-b"].Lines("federation: peer up", "peer=lab-a")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the labs never heard each other:\nlab-a:\n%s\nlab-b:\n%s", logs["lab-a"].String(), logs["lab-b"].String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if refused := append(logs["lab-a"].Lines("federation: refused"), logs["lab-a"].Lines("pki: refused")...); len(refused) > 0 {
		t.Errorf("lab-a refused: %v", refused)
	}
	if gossip {
		deadline := time.Now().Add(30 * time.Second)
		for len(logs["lab-a"].Lines("federation gossip: join", "member=lab-b/ts0", "federation_addr="+addrs["lab-b"])) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("lab-a never met lab-b in the federation's gossip:\n%s", logs["lab-a"].String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	killed := time.Now()
	_ = procs["lab-b"].Process.Kill()
	_ = procs["lab-b"].Wait()
	for len(logs["lab-a"].Lines("federation: peer lost", "peer=lab-b")) == 0 {
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("lab-a never noticed lab-b's loss:\n%s", logs["lab-a"].String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Seen from outside, through a loaded machine: the loss is noticed
	// after two intervals without a bid and a round; allow generous slack
	// for the processes' scheduling, not for the rule.
	if took := time.Since(killed); took > 10*time.Second {
		t.Errorf("lab-a noticed the loss after %v", took)
	}
	_ = procs["lab-a"].Process.Signal(syscall.SIGTERM)
	_ = procs["lab-a"].Wait()
}

// pollux bench federation --json: every decision committed in both
// ledgers (checked by the benchmark against every Raft state) and a
// loss noticed; the figures themselves are docs/benchmarks.md's.
func TestBenchFederation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	full := append(slices.Clone(selfExec), "bench", "federation", "--json", "--labs", "2", "--servers", "1", "--leases", "10", "--trials", "1", "--interval", "300ms",
		"--exec", strings.Join(selfExec, ","))
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = append(os.Environ(), "POLLUX_TEST_PROCESS=1")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep struct {
		Decisions          int                `json:"decisions"`
		LeaseDecisionsPerS float64            `json:"lease_decisions_per_s"`
		Verified           bool               `json:"verified"`
		LossSamplesS       []float64          `json:"loss_samples_s"`
		LossDetectionS     float64            `json:"loss_detection_s"`
		Latency            map[string]any     `json:"latency_ms"`
		Targets            map[string]any     `json:"targets"`
		Extra              map[string]float64 `json:"-"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Decisions != 30 || !rep.Verified || !(rep.LeaseDecisionsPerS > 0) || len(rep.LossSamplesS) != 1 || !(rep.LossDetectionS > 0) ||
		len(rep.Latency) != 3 || rep.Targets["met"] == nil {
		t.Fatalf("report %s", out)
	}
	if code, text := runPollux(t, "bench", "federation", "--labs", "9"); code != 2 || !strings.Contains(text, "--labs 9") {
		t.Errorf("--labs 9: exit %d %s", code, text)
	}
}

// A lab of three servers keeps its federation through a leader's death:
// the peer's bids reach whichever server is leader (a follower redirects
// them to the leader's federation address from the gossip), and the peer
// sees the lab up again once the new leader bids.
func TestFederationSurvivesLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	const interval = time.Second
	ba, err := pki.DevLabBundle(filepath.Join(dir, "lab-a", "tls"), "lab-a", []string{"s0", "s1", "s2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := pki.DevLabBundle(filepath.Join(dir, "lab-b", "tls"), "lab-b", []string{"ts0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := launch.FreePorts(13)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	// lab-a's server i: raft 4i, http 4i+1, gossip 4i+2, federation 4i+3;
	// lab-b's federation address: 12.
	var peers, fedAddrs, gossip []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("s%d=%s=%s", i, addr(4*i), addr(4*i+1)))
		fedAddrs = append(fedAddrs, addr(4*i+3))
		gossip = append(gossip, addr(4*i+2))
	}
	writeFed := func(path string, f fedlink.File) {
		raw, _ := json.Marshal(f)
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fedA, fedB := filepath.Join(dir, "lab-a", "federation.json"), filepath.Join(dir, "lab-b", "federation.json")
	writeFed(fedA, fedlink.File{Peers: []fedlink.PeerFile{{Name: "lab-b", Addresses: []string{addr(12)}, CAFile: bb.CA}}})
	writeFed(fedB, fedlink.File{Peers: []fedlink.PeerFile{{Name: "lab-a", Addresses: fedAddrs, CAFile: ba.CA}}})
	logsA := make([]*logbuf.Buffer, 3)
	procsA := make([]*exec.Cmd, 3)
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		logsA[i] = &logbuf.Buffer{}
		args := []string{"server", "--id", id, "--data-dir", filepath.Join(dir, "lab-a", id), "--raft", addr(4 * i), "--http", addr(4*i + 1),
			"--gossip-port", fmt.Sprint(ports[4*i+2]), "--fast-gossip", "--peers", strings.Join(peers, ","), "--bootstrap",
			"--join", strings.Join(gossip, ","), "--checkpoint-root", filepath.Join(dir, "ckpt"), "--log-level", "info",
			"--cluster", "lab-a", "--federation", fedA, "--federation-addr", addr(4*i + 3), "--federation-interval", interval.String()}
		procsA[i], _ = startProc(t, logsA[i], append(args, ba.Flags(id)...)...)
	}
	var logB logbuf.Buffer
	procB, _ := startProc(t, &logB, labServer(t, filepath.Join(dir, "lab-b"), bb, "--cluster", "lab-b", "--federation", fedB,
		"--federation-addr", addr(12), "--federation-interval", interval.String())...)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened\nlab-b:\n%s", what, logB.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("lab-b hearing lab-a", func() bool { return len(logB.Lines("federation: peer up", "peer=lab-a")) > 0 })
	leader := -1
	for i := range 3 {
		if len(logsA[i].Lines("allocator: leading")) > 0 {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("lab-a has no leader that bids")
	}
	_ = procsA[leader].Process.Kill()
	_ = procsA[leader].Wait()
	waitFor("a new leader in lab-a", func() bool {
		for i := range 3 {
			if i != leader && len(logsA[i].Lines("allocator: leading")) > 0 {
				return true
			}
		}
		return false
	})
	elected := time.Now()
	// Whether or not the failover outlasted two intervals, lab-b must
	// have lab-a up at the end: a loss, if any, followed by a return. (A
	// new leader that never bid would be logged lost within two and a
	// quarter intervals of the old leader's last bid, before its own
	// election plus three intervals.)
	waitFor("lab-b hearing lab-a's new leader", func() bool {
		lost, up := logB.Lines("federation: peer lost", "peer=lab-a"), logB.Lines("federation: peer up", "peer=lab-a")
		return len(lost) == 0 && time.Since(elected) > 3*interval || len(lost) > 0 && len(up) > len(lost)
	})
	for i := range 3 {
		if refused := logsA[i].Lines("federation: refused"); len(refused) > 0 {
			t.Errorf("lab-a's s%d refused: %v", i, refused)
		}
	}
	if refused := append(logB.Lines("federation: refused"), logB.Lines("pki: refused")...); len(refused) > 0 {
		t.Errorf("lab-b refused: %v", refused)
	}
	for _, p := range append(procsA, procB) {
		if p.ProcessState == nil {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}
}
