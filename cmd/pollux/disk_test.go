package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"pollux/testbed/builtin"
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
// of a running cluster: submissions must be refused with an error, no
// server may crash, and once space is freed every submission that had
// been acknowledged is still there, and new ones are taken again.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-process cluster")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	c, err := launch.Start(ctx, launch.Options{Exec: selfExec, Env: []string{"POLLUX_TEST_PROCESS=1"}, Dir: dir, Servers: 3, Agents: 0,
		Interval: 500 * time.Millisecond, LogLevel: "warn", DataSize: 16 << 20, Observe: true, Scenario: "disk-full"})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client()
	acked := map[string]bool{}
	submit := func(name string) launch.Answer {
		spec, err := launch.Job{Name: name, App: "cifar10"}.Spec(cat, 4)
		if err != nil {
			t.Fatal(err)
		}
		a := cl.SubmitAny(ctx, name, spec, 100*time.Millisecond, 0)
		if a.OK() {
			acked[name] = true
		}
		return a
	}
	for i := range 5 {
		if a := submit("before-" + string(rune('a'+i))); !a.OK() {
			t.Fatalf("before the disks fill: %s", a.Error())
		}
	}
	for _, m := range c.Servers {
		t.Logf("%s: filled with %d bytes", m.ID, fill(t, m.DataDir))
	}
	refused := 0
	for i := range 20 {
		a := submit("full-" + string(rune('a'+i)))
		t.Logf("submission on full disks: %v %s", a.OK(), a.Error())
		if !a.OK() {
			refused++
		}
	}
	for _, m := range c.Servers {
		if !m.Running() {
			t.Errorf("%s exited on a full disk (see %s)", m.ID, m.Log)
		}
	}
	t.Logf("%d of 20 submissions refused on full disks", refused)
	for _, m := range c.Servers {
		if err := os.Remove(filepath.Join(m.DataDir, "filler")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	if a := submit("after-a"); !a.OK() {
		t.Errorf("after space is freed: %s", a.Error())
	}
	js, stale, err := cl.JobsAny(ctx)
	if err != nil || stale {
		t.Fatalf("jobs: stale %v, %v", stale, err)
	}
	seen := map[string]bool{}
	for _, j := range js {
		seen[j.ID] = true
	}
	for name := range acked {
		if !seen[name] {
			t.Errorf("acknowledged job %s lost", name)
		}
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Error(err)
	}
}
