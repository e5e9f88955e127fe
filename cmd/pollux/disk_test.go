package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"pollux/internal/rootgate"
	"strings"
	"syscall"
	"testing"
	"time"

	"pollux/testbed/builtin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/history"
	"pollux/testbed/launch"
)

// fill writes dir/filler until the file system is full and returns how
// many bytes it took.
func fill(t *testing.T, dir string) int64 {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for size := 1 << 20; size >= 512; size /= 2 {
		buf := make([]byte, size)
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return n
}

// TestDiskFull fills the data directory (a small tmpfs) of every server
// of a running cluster: submissions must be refused with an error (507,
// not a timeout), no server may crash, and once space is freed every
// submission that had been acknowledged is still there, and new ones are
// taken again. The client history of the whole run must pass the checker
// (linearizable, nothing acknowledged lost).
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster")
	}
	rootgate.NeedRoot(t, "mounts a tmpfs")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	c := startCluster(ctx, t, launch.Options{Dir: dir, Servers: 3, NoAgents: true,
		Interval: 500 * time.Millisecond, LogLevel: "warn", DataSize: 16 << 20, Observe: true, Scenario: "disk-full"})
	defer c.finish()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	submit := func(name string) launch.Answer {
		spec, err := launch.Job{Name: name, App: "cifar10"}.Spec(cat, 4)
		if err != nil {
			t.Fatal(err)
		}
		return cl.SubmitAny(ctx, name, spec, 100*time.Millisecond, 10*time.Second)
	}
	for i := range 5 {
		if a := submit(fmt.Sprintf("before-%d", i)); !a.OK() {
			t.Fatalf("before the disks fill: %s", a.Error())
		}
	}
	for _, m := range c.Servers {
		t.Logf("%s: filled with %d bytes", m.ID, fill(t, m.DataDir))
	}
	for i := range 10 {
		a := submit(fmt.Sprintf("full-%d", i))
		if a.Type != history.Fail || a.Code != http.StatusInsufficientStorage {
			t.Errorf("submission %d on full disks: %s; want a 507 refusal", i, a.Error())
		}
	}
	for _, m := range c.Servers {
		if !m.Running() {
			t.Errorf("%s exited on a full disk (see %s)", m.ID, m.Log)
		}
	}
	for _, m := range c.Servers {
		if err := os.Remove(filepath.Join(m.DataDir, "filler")); err != nil {
			t.Fatal(err)
		}
	}
	if a := submit("after-0"); !a.OK() {
		t.Errorf("after space is freed: %s", a.Error())
	}
	if _, stale, err := cl.JobsAny(ctx); err != nil || stale {
		t.Fatalf("final read: stale %v, %v", stale, err)
	}
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
	lines, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := check.Check(check.Input{History: lines}, check.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 5 submitted before, 10 refused, 1 after. With no agent nothing
	// runs: the 6 acknowledged jobs must still be there (pending), which
	// the last linearizable read shows, and the history linearizable.
	o := res.Outcomes
	if o.Submitted != 16 || o.Unsubmitted != 10 || o.Lost != 6 || len(res.Violations) != 0 || !res.Linear.Linearizable() {
		t.Errorf("outcomes %+v, violations %v", o, res.Violations)
	}
	for _, j := range o.Jobs {
		if j.Outcome == check.Lost && !strings.HasPrefix(j.Reason, "still pending") {
			t.Errorf("acknowledged job %s: %s", j.Job, j.Reason)
		}
	}
}
