package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"pollux/internal/rootgate"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/cluster/pki"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/attack"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/netns"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/chaos/suite"
	"pollux/testbed/launch"
)

// chaosOptions is a small, fast cluster of test-binary processes.
func chaosOptions(t *testing.T, network launch.Network) driver.Options {
	return driver.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Servers: 3, Agents: 2, GPUsPerAgent: 2,
		TimeScale: 800, Converge: 90 * time.Second, Jobs: 4, Cancels: 1, Network: network,
		Schedule: schedule.Options{Gap: 1500 * time.Millisecond, ElectionTimeout: time.Second, ServerDown: time.Second,
			AgentDown: 4 * time.Second, AgentRestartDown: 200 * time.Millisecond, NetDown: 2 * time.Second},
		Logger: testLogger(t)}
}

// runShort runs one short scenario through the command's code and
// returns its JSON output, failing the test if the run failed.
func runShort(t *testing.T, sc schedule.Scenario, network launch.Network) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := suite.Run(ctx, []schedule.Scenario{sc}, nil, 7, chaosOptions(t, network), false, true, &out)
	var rep map[string]any
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("run: %v; output is not JSON (%v): %s", err, jerr, out.String())
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, k := range []string{"faults", "faults_injected", "faults_planned", "faults_skipped", "faults_skipped_why", "faults_by_kind", "partitions", "jobs_submitted", "jobs_completed", "jobs_failed", "jobs_cancelled",
		"jobs_unsubmitted", "lost_jobs", "violations", "linearizable", "failover_median_s", "failover_max_s", "replacement_max_s"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("JSON output lacks %q", k)
		}
	}
	return rep
}

// TestChaosShortScenario runs a short scenario end to end through the
// command's code: a leader kill, an agent kill and a worker kill under a
// workload of four jobs, one of them cancelled (and the driver's probe
// job after the leader kill; and a cancel of a job never submitted).
// Nothing may be lost, no invariant broken, the history linearizable,
// and the failover and the re-placement observed.
func TestChaosShortScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	sc := schedule.Scenario{Name: "short", Counts: []schedule.Count{{Kind: schedule.LeaderKill, N: 1}, {Kind: schedule.AgentKill, N: 1}, {Kind: schedule.WorkerKill, N: 1}}}
	rep := runShort(t, sc, launch.Loopback)
	// Four jobs of the workload and a probe job after the leader kill;
	// the cancelled one may have completed before its cancel.
	if rep["faults"] != 3.0 || rep["lost_jobs"] != 0.0 || rep["violations"] != 0.0 || rep["jobs_submitted"] != 5.0 ||
		rep["jobs_completed"].(float64)+rep["jobs_cancelled"].(float64) != 5.0 || rep["jobs_cancelled"].(float64) > 1 ||
		rep["linearizable"] != true {
		t.Errorf("want 3 faults, 5 jobs submitted and completed or (one) cancelled, none lost, no violation, linearizable; got %v", rep)
	}
	if rep["failover_max_s"].(float64) <= 0 {
		t.Errorf("no failover measured after the leader kill: %v", rep)
	}
}

// TestChaosShortNetworkScenario runs the network faults in network
// namespaces: the leader isolated from everyone (a failover must be
// observed), a non-transitive bridge, and 200 ms of added latency, each
// healed after it.
func TestChaosShortNetworkScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	if err := netns.Available(); err != nil {
		rootgate.Skip(t, "network namespaces unavailable, the partition scenarios skip: %v", err)
	}
	sc := schedule.Scenario{Name: "short-net", Counts: []schedule.Count{{Kind: schedule.IsolateLeader, N: 1}, {Kind: schedule.Bridge, N: 1},
		{Kind: schedule.Latency, N: 1}}}
	rep := runShort(t, sc, launch.Namespaces)
	if rep["faults"] != 3.0 || rep["partitions"] != 2.0 || rep["lost_jobs"] != 0.0 || rep["violations"] != 0.0 || rep["linearizable"] != true {
		t.Errorf("want 3 faults (2 partitions), none lost, no violation, linearizable; got %v", rep)
	}
	if rep["failover_max_s"].(float64) <= 0 {
		t.Errorf("no failover measured after the leader's isolation: %v", rep)
	}
}

func TestChaosUnknownScenario(t *testing.T) {
	if code := run([]string{"chaos", "--scenario", "no-such"}); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	if code := run([]string{"chaos", "--network", "carrier-pigeon"}); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	for _, args := range [][]string{{"--lease-ttl", "0s"}, {"--lease-ttl", "25h"}, {"--time-scale", "0"}, {"--converge", "-1s"},
		{"--judge", t.TempDir()}, {"--network", "loopback"}, {"--log-level", "loud"}} {
		if code := run(append([]string{"chaos", "--scenario", "lab-loss"}, args...)); code != 2 {
			t.Errorf("chaos --scenario lab-loss %v: exit code %d, want 2", args, code)
		}
	}
}

// TestGarbageOnEveryPort sends seeded random bytes to the Raft, HTTP,
// gossip (TCP and UDP) and actor ports of every server of a running
// (secured) cluster, both raw, where they meet the TLS handshake or the
// gossip keyring, and inside TLS sessions opened with the cluster's own
// credentials, where they reach the decoders behind TLS; and bad job
// specs to its API: no server may exit, the bad specs must be refused
// with a 4xx and an error message, and the cluster must still elect,
// commit and complete every job, with observers' records that show no
// failure.
func TestGarbageOnEveryPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 5-process cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir, Servers: 3, Agents: 2,
		GPUsPerAgent: 2, Interval: 500 * time.Millisecond, TimeScale: 800, Grace: 2 * time.Second, LogLevel: "warn",
		Observe: true, Scenario: "garbage"})
	defer c.finish()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	submit := func(name, app string) {
		t.Helper()
		spec, err := launch.Job{Name: name, App: app}.Spec(cat, 4)
		if err != nil {
			t.Fatal(err)
		}
		if a := cl.SubmitAny(ctx, name, spec, 250*time.Millisecond, 15*time.Second); !a.OK() {
			t.Fatalf("submitting %s: %s", name, a.Error())
		}
	}
	submit("before-1", "cifar10")
	rng := rand.New(rand.NewPCG(42, 1))
	garbage := func(prefix []byte) []byte {
		b := make([]byte, 1+rng.IntN(64<<10))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return append(append([]byte(nil), prefix...), b...)
	}
	// Prefixes that get past the first byte or line, so that the bytes
	// reach the decoders behind it: the Raft port's channel byte (1 Raft
	// RPC, 2 a forwarded write) and Raft's RPC type byte, a forwarded
	// write's frame length, an HTTP request line, the HTTP/2 preface of
	// gRPC. Raw, they meet the TLS handshake (and the gossip keyring).
	prefixes := map[string][][]byte{
		"raft":   {nil, {0}, {1}, {1, 0}, {1, 1}, {1, 2}, {1, 3}, {2}, {2, 0, 0, 0x10, 0}, {3}},
		"http":   {nil, []byte("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n"), []byte("GET /v1/status HTTP/1.1\r\n")},
		"gossip": {nil, {0}, {1}, {6}, {8}},
		"actor":  {nil, []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")},
	}
	// Inside TLS: a server's certificate gets through the Raft and actor
	// ports' role checks, the client certificate through the API's.
	creds, err := c.TLS().Credentials("s0")
	if err != nil {
		t.Fatal(err)
	}
	raftTLS, err1 := creds.ClientConfig(pki.ChannelRaft)
	actorTLS, err2 := creds.ClientConfig(pki.ChannelActor)
	apiTLS, err3 := c.TLS().ClientTLS()
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	actorTLS.NextProtos = []string{"h2"}
	inTLS := map[string]*tls.Config{"raft": raftTLS, "http": apiTLS, "actor": actorTLS}
	for _, s := range c.Servers {
		for _, port := range []struct{ name, addr string }{{"raft", s.Raft}, {"http", s.HTTP}, {"gossip", s.Gossip}, {"actor", s.Actor}} {
			ps := prefixes[port.name]
			for i := range 12 {
				sendTCP(t, port.addr, garbage(ps[i%len(ps)]))
			}
			if cfg := inTLS[port.name]; cfg != nil {
				for i := range 2 * len(ps) {
					sendTLS(t, port.addr, cfg, garbage(ps[i%len(ps)]))
				}
			}
		}
		for range 30 { // memberlist also reads UDP packets on its port
			if conn, err := net.Dial("udp", s.Gossip); err == nil {
				g := garbage(nil)
				_, _ = conn.Write(g[:min(len(g), 1+rng.IntN(1400))])
				conn.Close()
			}
		}
	}
	exited := func() (out []string) {
		for _, m := range append(c.Servers, c.Agents...) {
			if !m.Running() {
				out = append(out, m.ID)
			}
		}
		return out
	}
	if ex := exited(); len(ex) > 0 {
		t.Fatalf("processes exited after the garbage: %v", ex)
	}
	badSpecs(t, c.HTTPClient(30*time.Second), c.Servers[0].HTTP)

	if _, _, err := c.Leader(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	submit("after-1", "ncf")
	deadline := time.Now().Add(90 * time.Second)
	for {
		js, stale, err := cl.JobsAny(ctx)
		done := 0
		for _, j := range js {
			if j.State == "completed" {
				done++
			}
		}
		if err == nil && !stale && done == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs not completed within 90 s: %+v (stale %v, %v)", js, stale, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if ex := exited(); len(ex) > 0 {
		t.Errorf("processes exited: %v", ex)
	}
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	res := judgeDir(t, dir)
	if fs := res.Failures(); len(fs) > 0 {
		t.Errorf("the observers' records show failures: %q", fs)
	}
	if o := res.Outcomes; o.Submitted != 2 || o.Completed != 2 {
		t.Errorf("outcomes %+v; want 2 jobs submitted and completed", o)
	}
}

// sendTCP writes b to addr and closes the connection, ignoring errors (a
// server may close first: that is a correct answer to garbage).
func sendTCP(t *testing.T, addr string, b []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
		return
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = conn.Write(b)
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<16))
}

// sendTLS opens a TLS session to addr with cfg (which the port must
// accept), writes b in it and closes it, ignoring errors after the
// handshake.
func sendTLS(t *testing.T, addr string, cfg *tls.Config, b []byte) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
		return
	}
	defer raw.Close()
	host, _, _ := net.SplitHostPort(addr)
	cfg = cfg.Clone()
	cfg.ServerName = host
	conn := tls.Client(raw, cfg)
	// A loaded machine (the CI's, or this one with the race detector)
	// may take seconds to answer a handshake; refusing it would fail
	// with an error, not a timeout.
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := conn.Handshake(); err != nil {
		t.Errorf("TLS handshake with %s and the cluster's own credentials: %v", addr, err)
		return
	}
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = conn.Write(b)
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<16))
}

// badSpecs submits malformed, oversized, absurd and unknown-field specs
// through the real API and wants a 4xx with an error naming the problem
// for each, and none of them in the job list.
func badSpecs(t *testing.T, client *http.Client, addr string) {
	t.Helper()
	good := "name: bad-%d\napplication: cifar10\n"
	cases := []struct {
		name, body, want string
		code             int
	}{
		{"not yaml", "\x00\xff{{{: [", "jobspec", http.StatusBadRequest},
		{"oversized", fmt.Sprintf(good, 1) + "#" + strings.Repeat("x", 1<<20+10) + "\n", "too large", http.StatusRequestEntityTooLarge},
		{"absurd replicas", fmt.Sprintf(good, 2) + "max_replicas: 1000000000\n", "max_replicas", http.StatusBadRequest},
		{"negative replicas", fmt.Sprintf(good, 3) + "min_replicas: -4\n", "min_replicas", http.StatusBadRequest},
		{"absurd batch", fmt.Sprintf(good, 4) + "max_batch_size: 99999999999999999999\n", "max_batch_size", http.StatusBadRequest},
		{"batch below init", fmt.Sprintf(good, 5) + "init_batch_size: 512\nmax_batch_size: 8\n", "batch", http.StatusBadRequest},
		{"unknown field", fmt.Sprintf(good, 6) + "gpus_please: 8\n", "gpus_please", http.StatusBadRequest},
		{"bad name", "name: \"../../etc\"\napplication: cifar10\n", "name", http.StatusBadRequest},
		{"empty", "", "", http.StatusBadRequest},
	}
	for _, tc := range cases {
		resp, err := client.Post("https://"+addr+api.PathJobs, "application/yaml", strings.NewReader(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var e api.Error
		derr := json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.code || derr != nil || e.Error == "" || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s: %s, error %q (decode: %v); want %d and an error mentioning %q", tc.name, resp.Status, e.Error, derr, tc.code, tc.want)
		}
	}
	resp, err := client.Get("https://" + addr + api.PathJobs)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var js []api.Job
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if strings.HasPrefix(j.ID, "bad-") {
			t.Errorf("a refused spec became job %+v", j)
		}
	}
}

// testLogger sends the driver's progress to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// TestAttackScenario runs `pollux chaos --scenario attack --json`
// through the command's code: every
// attack is refused, nothing changes, a normal job completes after them
// (exit 0), the JSON has exactly the fields issue 12 names, and every
// case the suite has ran and was refused.
func TestAttackScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and attacks it")
	}
	var out bytes.Buffer
	err := suite.Attack(context.Background(), attack.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Logger: testLogger(t)},
		true, &out)
	var res map[string]json.RawMessage
	if jerr := json.Unmarshal(out.Bytes(), &res); jerr != nil {
		t.Fatalf("%v; output %q: %v", err, out.String(), jerr)
	}
	var r attack.Result
	_ = json.Unmarshal(out.Bytes(), &r)
	names := attack.Names()
	if err != nil || r.Attacks != len(names) || r.Refused != r.Attacks || r.Succeeded != 0 || len(res) != 4 || len(r.Cases) != r.Attacks {
		t.Fatalf("%v (%d cases): %s", err, len(names), out.String())
	}
	for _, name := range names {
		if c, ok := r.Cases[name]; !ok || !c.Refused || c.How == "" {
			t.Errorf("case %s: %+v", name, c)
		}
	}
}

// TestAttackScenarioSeesWhatGetsThrough: with agents that allow any
// shell command, the forbidden job runs, and the scenario says so (its
// worker process seen running, or the file it wrote, the job not
// failed) and fails. Which of the two the observer sees first depends
// on the machine's load: on a loaded one the worker runs before its
// shell has written the file.
func TestAttackScenarioSeesWhatGetsThrough(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and attacks it")
	}
	res, err := attack.Run(context.Background(), attack.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"},
		AllowCommands: []string{"emulated:*", "/bin/sh -c **"}, Only: []string{"job-command-not-allowed", "done-from-rank-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Dir != "" {
		defer os.RemoveAll(res.Dir)
	}
	c := res.Cases["job-command-not-allowed"]
	seen := strings.Contains(c.How, "files [shell]") || strings.Contains(c.How, "worker process")
	if res.Pass() || res.Attacks != 2 || res.Succeeded != 1 || c.Refused || !seen ||
		!res.Cases["done-from-rank-1"].Refused {
		t.Fatalf("result %+v", res)
	}
	t.Logf("job-command-not-allowed: %s", c.How)
}
