package main

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"pollux/internal/rootgate"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/actors/node/workerproto"
	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
)

// TestAgentRefusesForgedReportsAndForbiddenJobs drives a real agent
// process: reports on its TLS report port without the token of their
// rank, or a done from rank 1, are refused (connection closed, one log
// line naming the peer) and never reach the owner, while its real
// workers' reports do; a command outside the default allow-list and a
// checkpoint directory outside the root are denied in the ack and start
// nothing.
func TestAgentRefusesForgedReportsAndForbiddenJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent and worker processes")
	}
	c := newController(t)
	var log logbuf.Buffer
	_, ready := startAgentTo(t, &log, "a5", "--gpus", "4", "--time-scale", "1", "--restart-cost", "0s", "--join", c.members.Addr())
	c.waitMember("a5", cluster.EventJoin)
	rj := emulatedRun(c, "long-a5", 2)
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 1, Runs: []*pb.RunJob{rj}}); !ack.Ok || len(ack.Runs) != 1 || ack.Runs[0].Denied != "" {
		t.Fatalf("ack %v", ack)
	}
	if r, ok := c.next().(*pb.WorkerReport); !ok || r.Rank != 0 {
		t.Fatalf("first message %v", r)
	}
	pool, err := pki.LoadPool(testBundle().CA)
	if err != nil {
		t.Fatal(err)
	}
	key := c.key
	forged := map[string]workerproto.Report{
		"done without a token":         {Job: rj.Job, Incarnation: 1, Rank: 0, Done: true},
		"done with rank 1's token":     {Job: rj.Job, Incarnation: 1, Rank: 0, Done: true, Token: workerproto.ReportToken(key, rj.Job, 1, 1)},
		"done from rank 1":             {Job: rj.Job, Incarnation: 1, Rank: 1, Done: true, Token: workerproto.ReportToken(key, rj.Job, 1, 1)},
		"done of the next incarnation": {Job: rj.Job, Incarnation: 2, Rank: 0, Done: true, Token: workerproto.ReportToken(key, rj.Job, 2, 0)},
	}
	for name, r := range forged {
		r.StepTime, r.LocalBatch = 1, 1
		line, err := workerproto.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ready.Reports, pki.ReportClient(pool))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(line); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(conn); err != nil {
			t.Errorf("%s: connection not closed by the agent: %v", name, err)
		}
		peer := conn.LocalAddr().String()
		conn.Close()
		deadline := time.Now().Add(5 * time.Second)
		for len(log.Lines("refused worker report", "peer="+peer)) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no refusal naming %s in the agent's log:\n%s", name, peer, log.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The workers' own reports still arrive; no done among them.
	for range 3 {
		if r, ok := c.next().(*pb.WorkerReport); !ok || r.Done {
			t.Fatalf("message %v", r)
		}
	}
	ack := c.assign(ready.Actor, &pb.Assign{Generation: 2, Runs: []*pb.RunJob{rj}})
	if len(ack.Runs) != 1 || ack.Runs[0].Done || ack.Runs[0].Alive != 2 {
		t.Errorf("ack after the forgeries %v", ack)
	}

	// Jobs the agent's policy forbids.
	sh := c.withTokens(&pb.RunJob{Job: "sh-a5", Incarnation: 1, Command: []string{"/bin/sh", "-c", "touch /tmp/pwned-a5"}, Replicas: 1,
		WorldSize: 1, NumNodes: 1, MasterAddr: "127.0.0.1", MasterPort: 29501, InitBatch: 1, AtomicBatch: 1, Gain: 1,
		CheckpointDir: filepath.Join(c.root, "sh-a5"), Owner: c.owner})
	out := emulatedRun(c, "out-a5", 1)
	out.CheckpointDir = filepath.Join(t.TempDir(), "elsewhere")
	ack = c.assign(ready.Actor, &pb.Assign{Generation: 3, Runs: []*pb.RunJob{rj, sh, out}})
	denied := map[string]string{}
	for _, rs := range ack.Runs {
		denied[rs.Job] = rs.Denied
	}
	if !ack.Ok || !strings.Contains(denied["sh-a5"], "allow-list") || !strings.Contains(denied["out-a5"], "outside the cluster's checkpoint root") ||
		denied[rj.Job] != "" {
		t.Errorf("ack of forbidden jobs %v", ack)
	}
	if _, err := os.Stat("/tmp/pwned-a5"); err == nil {
		t.Error("the forbidden command ran")
	}
	for _, job := range []string{"sh-a5", "out-a5"} {
		if n := len(log.Lines("refusing to run a job", "job="+job)); n != 1 {
			t.Errorf("%d log lines for the denial of %s", n, job)
		}
		if pids := processesWithEnv("POLLUX_JOB_ID=" + job); len(pids) > 0 {
			t.Errorf("workers of %s run: %v", job, pids)
		}
	}
	if _, err := os.Stat(out.CheckpointDir); err == nil {
		t.Error("the checkpoint directory outside the root was made")
	}
}

// TestAgentRunsWorkersAsRunAsUser: `pollux agent --run-as nobody` runs a
// worker (a command of its --allow-command) as nobody, with only the
// protocol's variables and --pass-env's in its environment (not
// KEPT_FROM_WORKERS, which the agent has), in a checkpoint directory
// nobody owns, and can read the CA it is given.
func TestAgentRunsWorkersAsRunAsUser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent and worker processes")
	}
	rootgate.NeedRoot(t, "runs workers as another user")
	u, err := user.Lookup("nobody")
	if err != nil {
		rootgate.Skip(t, "no user nobody: %v", err)
	}
	c := newController(t)
	for _, d := range []string{filepath.Dir(c.root), c.root} {
		if err := os.Chmod(d, 0o755); err != nil { // shared storage nobody reaches
			t.Fatal(err)
		}
	}
	t.Setenv("PASSED_TO_WORKERS", "yes")
	t.Setenv("KEPT_FROM_WORKERS", "secret")
	_, ready := startAgent(t, "a6", "--gpus", "1", "--join", c.members.Addr(), "--run-as", "nobody",
		"--allow-command", "/bin/sh -c **", "--pass-env", "PASSED_TO_WORKERS")
	c.waitMember("a6", cluster.EventJoin)
	rj := c.withTokens(&pb.RunJob{Job: "whoami", Incarnation: 1, Replicas: 1, WorldSize: 1, NumNodes: 1,
		Command:    []string{"/bin/sh", "-c", `id -u > "$POLLUX_CHECKPOINT_DIR/uid" && env > "$POLLUX_CHECKPOINT_DIR/env" && cat "$POLLUX_REPORT_CA" > /dev/null`},
		MasterAddr: "127.0.0.1", MasterPort: 29502, InitBatch: 1, AtomicBatch: 1, Gain: 1,
		CheckpointDir: filepath.Join(c.root, "whoami"), Owner: c.owner})
	if ack := c.assign(ready.Actor, &pb.Assign{Generation: 1, Runs: []*pb.RunJob{rj}}); !ack.Ok || ack.Runs[0].Denied != "" {
		t.Fatalf("ack %v", ack)
	}
	if m, ok := c.next().(*pb.WorkerExited); !ok || m.ExitCode != 0 {
		t.Fatalf("worker exit %v", m)
	}
	uid, _ := os.ReadFile(filepath.Join(rj.CheckpointDir, "uid"))
	if strings.TrimSpace(string(uid)) != u.Uid {
		t.Errorf("worker ran as uid %q, want nobody's %s", uid, u.Uid)
	}
	st, err := os.Stat(rj.CheckpointDir)
	if err != nil || strconv.Itoa(int(st.Sys().(*syscall.Stat_t).Uid)) != u.Uid {
		t.Errorf("checkpoint directory %v, %v: not nobody's", st, err)
	}
	env, _ := os.ReadFile(filepath.Join(rj.CheckpointDir, "env"))
	var names []string
	for _, kv := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
		switch {
		case kv == "PASSED_TO_WORKERS=yes", strings.HasPrefix(name, "POLLUX_"), name == "PWD", name == "SHLVL", name == "_":
			// (POLLUX_TEST_PROCESS too: startAgent passes it)
		case name == "RANK", name == "LOCAL_RANK", name == "WORLD_SIZE", name == "MASTER_ADDR", name == "MASTER_PORT", name == "CUDA_VISIBLE_DEVICES":
		default:
			t.Errorf("worker environment has %s", kv)
		}
	}
	// The report token is in a file of the worker's user, not in the
	// environment.
	if !strings.Contains(string(env), "PASSED_TO_WORKERS=yes") || !strings.Contains(string(env), workerproto.EnvReportTokenFile+"=") ||
		strings.Contains(string(env), workerproto.EnvReportToken+"=") {
		t.Errorf("worker environment %v", names)
	}
}
