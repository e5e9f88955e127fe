package launch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pollux/internal/cpuset"
	"pollux/internal/testbin"
)

// agentTemps are the names of the pollux-agent-* entries in dir.
func agentTemps(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "pollux-agent-") {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestKilledAgentLeavesItsTempFilesInTheRun: an agent killed with
// SIGKILL never removes its temporary directories (its workers' report
// tokens among them); they stay in its own TMPDIR in the run's
// directory, none lands in the launcher's TMPDIR, and an agent stopped
// cleanly removes its own.
func TestKilledAgentLeavesItsTempFilesInTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pollux and starts a cluster of its processes")
	}
	bin := testbin.Build(t)
	dir := t.TempDir()
	// Where the members' temporary files went without a TMPDIR of their
	// own: the launcher's.
	launcherTmp := t.TempDir()
	t.Setenv("TMPDIR", launcherTmp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Exec: []string{bin}, Dir: dir, Servers: 1, Agents: 2, GPUsPerAgent: 1,
		Network: Loopback, LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Close() // after a failure before Stop
		if t.Failed() {
			for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
				t.Logf("%s/%s%s", m.Role, m.ID, logTail(m.Log))
			}
		}
	}()
	killed, stopped := c.Agents[0], c.Agents[1]
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		if want := filepath.Join(dir, "tmp", m.ID); m.TempDir != want {
			t.Errorf("%s's TempDir %q, want %q", m.ID, m.TempDir, want)
		}
		if st, err := os.Stat(m.TempDir); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s's TempDir: %v, %v; want a directory of mode 0700", m.ID, st, err)
		}
	}
	if err := c.Kill(killed, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := agentTemps(t, launcherTmp); len(got) > 0 {
		t.Errorf("the launcher's TMPDIR holds %v", got)
	}
	got := agentTemps(t, killed.TempDir)
	if !slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "pollux-agent-tokens-") }) {
		t.Errorf("the killed agent's TempDir holds %v, want its pollux-agent-tokens-* directory", got)
	}
	if got := agentTemps(t, stopped.TempDir); len(got) > 0 {
		t.Errorf("the agent stopped cleanly left %v", got)
	}
}

// TestStartSaysWhyAMemberExited: a server that exits before it is ready
// fails the start with the end of its log in the error, so that a run
// whose directory is gone (a test's) still tells why.
func TestStartSaysWhyAMemberExited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The "binary" writes what a server would write when its port was
	// taken, and exits.
	exec := []string{"/bin/sh", "-c", "echo 'server: raft transport: listen tcp 127.0.0.1:7000: bind: address already in use' >&2; exit 1", "sh"}
	_, err := Start(ctx, Options{Exec: exec, Dir: t.TempDir(), Servers: 1, Agents: 1, Network: Loopback})
	if !errors.Is(err, ErrCluster) {
		t.Fatalf("start: %v, want %v", err, ErrCluster)
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("the error does not quote the server's log: %v", err)
	}
}

func TestLogTail(t *testing.T) {
	long := strings.Repeat("x", 100) + "\n"
	for _, tt := range []struct {
		name, log, want string
	}{
		{"empty", "", ""},
		{"short", "a\nb\n", "; its log ends with:\na\nb"},
		{"long: whole lines only", strings.Repeat(long, 40) + "last\n", "; its log ends with:\n" + strings.Repeat(long, 20) + "last"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := t.TempDir() + "/m.log"
			if err := os.WriteFile(p, []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := logTail(p); got != tt.want {
				t.Errorf("got %d bytes %q..., want %d bytes", len(got), got[:min(len(got), 40)], len(tt.want))
			}
		})
	}
	if got := logTail(t.TempDir() + "/missing.log"); got != "" {
		t.Errorf("a missing log: %q", got)
	}
}

// TestReservePorts: a reserved port cannot be taken until it is released
// to its process, and FreePorts does not hand it out meanwhile.
func TestReservePorts(t *testing.T) {
	r, err := ReservePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Ports[i])) }
	if ln, err := net.Listen("tcp", addr(0)); err == nil {
		ln.Close()
		t.Fatal("a reserved port was free to take")
	}
	free, err := FreePorts(64)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range free {
		if slices.Contains(r.Ports, p) {
			t.Fatalf("FreePorts handed out reserved port %d", p)
		}
	}
	r.Release(0)
	ln, err := net.Listen("tcp", addr(0))
	if err != nil {
		t.Fatalf("the released port: %v", err)
	}
	ln.Close()
}

// AgentCores gives each agent a share of the affinity of its own, the
// shares covering it and each holding the agent's slots, and nothing
// (all cores each) when there are more slots in all than cores.
func TestAgentCores(t *testing.T) {
	all, err := cpuset.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	n := len(all)
	for _, tc := range [][2]int{{1, 1}, {2, 1}, {n, 1}, {n + 1, 1}, {1, n}, {2, n}, {1, n + 1}} {
		agents, slots := tc[0], tc[1]
		shares, err := AgentCores(agents, slots)
		if err != nil {
			t.Fatal(err)
		}
		if agents*slots > n {
			if shares != nil {
				t.Errorf("%d agents of %d slots on %d cores: shares %v, want none", agents, slots, n, shares)
			}
			continue
		}
		if len(shares) != agents || !slices.Equal(slices.Concat(shares...), all) {
			t.Errorf("%d agents of %d slots on cores %v: shares %v", agents, slots, all, shares)
		}
		for i, s := range shares {
			if len(s) < slots {
				t.Errorf("%d agents of %d slots on cores %v: agent %d got %v", agents, slots, all, i, s)
			}
		}
	}
}
