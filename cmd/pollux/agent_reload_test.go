package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/actors/pb"
	"pollux/internal/logbuf"
)

// TestAgentReloadsItsAllowListOnHangup: an agent run with --config
// re-reads the file's allow-list on SIGHUP; a run assigned after an
// entry is revoked is denied, and a bad file changes nothing.
func TestAgentReloadsItsAllowListOnHangup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent process")
	}
	c := newController(t)
	file := filepath.Join(t.TempDir(), "agent.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("gpus: 2\nallow-command: ['emulated:cifar10', 'emulated:imagenet']\n")
	var logs logbuf.Buffer
	agent, ready := startAgentTo(t, &logs, "a6", "--config", file, "--log-level", "info", "--time-scale", "1", "--join", c.members.Addr())
	hup := func(want string) {
		t.Helper()
		n := len(logs.Lines(want))
		if err := agent.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); len(logs.Lines(want)) == n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q logged after SIGHUP:\n%s", want, logs.String())
			}
		}
	}
	denied := func(gen uint64, job string) string {
		t.Helper()
		rj := emulatedRun(c, job, 1)
		ack := c.assign(ready.Actor, &pb.Assign{Generation: gen, Runs: []*pb.RunJob{rj}})
		if !ack.Ok {
			t.Fatal(ack.Error)
		}
		for _, rs := range ack.Runs {
			if rs.Job == job {
				return rs.Denied
			}
		}
		t.Fatalf("no status of %s in %v", job, ack)
		return ""
	}
	if why := denied(1, "before"); why != "" {
		t.Fatalf("allowed run denied: %s", why)
	}
	write("gpus: 2\nallow-command: ['emulated:imagenet']\n")
	hup("agent: allow-list reloaded")
	if why := denied(2, "after"); !strings.Contains(why, "not in this agent's allow-list") {
		t.Errorf("a run after the revocation: denied %q", why)
	}
	write("gpus: 2\nallow-command: ['emulated:[']\n")
	hup("allow-list not reloaded")
	write("gpus: 2\nallow-commands: ['emulated:*']\n")
	hup("allow-list not reloaded")
	if why := denied(3, "bad-file"); !strings.Contains(why, "not in this agent's allow-list") {
		t.Errorf("a bad file changed the allow-list: denied %q", why)
	}
}
