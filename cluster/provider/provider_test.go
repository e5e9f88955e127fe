package provider

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/cluster/pki"
	"pollux/internal/logbuf"
)

func testLogger() (*slog.Logger, *logbuf.Buffer) {
	var b logbuf.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// A command that hangs is killed at its timeout (its children too),
// retried, and reported as a timeout; the log has every attempt.
func TestExecHangingCommandTimesOut(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "attempts")
	log, buf := testLogger()
	// The shell starts a child that would outlive it, then hangs.
	e, err := NewExec(Exec{
		AddCommand:    []string{"/bin/sh", "-c", `echo "booting $0" >> ` + marker + `; echo "asked for $0"; sleep 30 & wait`},
		RemoveCommand: []string{"/bin/true"},
		Timeout:       300 * time.Millisecond, Attempts: 2, Backoff: 10 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = e.Add(context.Background(), "node-7")
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("a hanging command: %v, want a timeout", err)
	}
	// Two attempts of 300 ms each, not the command's 30 s.
	if took > 15*time.Second {
		t.Fatalf("the hanging command held Add for %v", took)
	}
	b, _ := os.ReadFile(marker)
	if got := strings.Count(string(b), "booting node-7"); got != 2 {
		t.Errorf("%d attempts ran the command, want 2 (%q)", got, b)
	}
	if s := buf.String(); strings.Count(s, `output="asked for node-7"`) != 2 || !strings.Contains(s, "attempt=2") {
		t.Errorf("the attempts' output is not in the log:\n%s", s)
	}
}

// A failing command is retried with backoff until it succeeds; its
// output and exit status are logged.
func TestExecRetriesFailures(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	log, buf := testLogger()
	// Fails twice, then succeeds.
	script := `n=$(cat ` + count + ` 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + count + `; ` +
		`if [ $n -lt 3 ]; then echo "no capacity for $0" >&2; exit 3; fi; echo "resumed $0"`
	e, err := NewExec(Exec{AddCommand: []string{"/bin/sh", "-c", script}, RemoveCommand: []string{"/bin/sh", "-c", "exit 1"},
		Timeout: 10 * time.Second, Attempts: 3, Backoff: 20 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Add(context.Background(), "n1"); err != nil {
		t.Fatalf("third attempt should succeed: %v", err)
	}
	if b, _ := os.ReadFile(count); strings.TrimSpace(string(b)) != "3" {
		t.Errorf("ran %q times", b)
	}
	s := buf.String()
	if strings.Count(s, `output="no capacity for n1"`) != 2 || !strings.Contains(s, "resumed n1") || !strings.Contains(s, "exit status 3") {
		t.Errorf("log:\n%s", s)
	}
	if err := e.Remove(context.Background(), "n1"); !errors.Is(err, ErrCommand) {
		t.Errorf("a remove command that always fails: %v", err)
	}
}

func TestExecBadConfig(t *testing.T) {
	for _, e := range []Exec{{}, {AddCommand: []string{"x"}}, {AddCommand: []string{"x"}, RemoveCommand: []string{"y"}, Timeout: -1}} {
		if _, err := NewExec(e); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", e, err)
		}
	}
}

// fakeAgent is a program that behaves like `pollux agent` for the local
// provider: a ready line on stdout, then it runs until SIGTERM; it
// records its arguments.
func fakeAgent(t *testing.T, dir string) []string {
	script := `echo "$@" >> ` + filepath.Join(dir, "starts") + `; trap 'exit 0' TERM; echo '{"name":"x"}'; while :; do sleep 0.05; done`
	return []string{"/bin/sh", "-c", script, "fake"}
}

// The local provider issues each machine its own agent certificate from
// the cluster CA, starts it after the boot delay as the node template
// (its GPUs and GPU type), does nothing when it
// runs already (another server's provider asking again after a
// failover), and stops it.
func TestLocalAddRemove(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caCert, caKey, err := pki.WriteCA(filepath.Join(dir, "ca"), ca)
	if err != nil {
		t.Fatal(err)
	}
	gossip := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(gossip, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log, _ := testLogger()
	mk := func() *Local {
		l, err := NewLocal(Local{Dir: filepath.Join(dir, "machines"), Exec: fakeAgent(t, dir), GPUs: 4, GPUType: "a100", Join: []string{"127.0.0.1:1"},
			CACert: caCert, CAKey: caKey, GossipKey: gossip, BootDelay: 200 * time.Millisecond, StopTimeout: 5 * time.Second, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := mk(), mk() // two servers' providers on one machine
	t.Cleanup(func() { _ = a.StopAll(context.Background()) })
	ctx := context.Background()
	start := time.Now()
	if err := a.Add(ctx, "auto-1"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("started after %v, before the boot delay", took)
	}
	if err := b.Add(ctx, "auto-1"); err != nil {
		t.Fatal(err)
	}
	starts, _ := os.ReadFile(filepath.Join(dir, "starts"))
	if n := strings.Count(string(starts), "--name auto-1"); n != 1 {
		t.Fatalf("auto-1 started %d times:\n%s", n, starts)
	}
	if !strings.Contains(string(starts), "--gpus 4 ") || !strings.Contains(string(starts), "--gpu-type a100") {
		t.Errorf("the agent was not started as the template (4 GPUs of type a100): %s", starts)
	}
	if got := b.Running(); !slices.Equal(got, []string{"auto-1"}) {
		t.Errorf("running %v", got)
	}
	// Its certificate is an agent's of that name, signed by the CA.
	creds, err := pki.LoadCredentials(caCert, filepath.Join(dir, "machines", "auto-1", "tls", "agent-auto-1.pem"),
		filepath.Join(dir, "machines", "auto-1", "tls", "agent-auto-1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if id := creds.Identity; id.Role != pki.RoleAgent || id.Name != "auto-1" {
		t.Errorf("certificate identity %v", id)
	}
	if !strings.Contains(string(starts), "--cert "+filepath.Join(dir, "machines", "auto-1", "tls", "agent-auto-1.pem")) {
		t.Errorf("the agent was not given its certificate: %s", starts)
	}
	if err := b.Remove(ctx, "auto-1"); err != nil {
		t.Fatal(err)
	}
	if got := a.Running(); len(got) != 0 {
		t.Errorf("still running after Remove: %v", got)
	}
	if err := a.Remove(ctx, "auto-1"); err != nil {
		t.Errorf("removing a removed machine: %v", err)
	}
}

func TestLocalBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, l := range []Local{
		{Dir: dir, Exec: []string{"x"}, GPUs: 4, Join: []string{"a"}},
		{Dir: dir, Exec: []string{"x"}, GPUs: 0, Join: []string{"a"}, Insecure: true},
		{Dir: dir, Exec: []string{"x"}, GPUs: 4, Join: []string{"a"}, CACert: "/nope", CAKey: "/nope", GossipKey: "/nope"},
	} {
		if _, err := NewLocal(l); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", l, err)
		}
	}
}
