package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/actors/server/api"
	"pollux/testbed/launch"
)

// TestSnapshotSaveAndRestore: `pollux operator snapshot save` on one
// cluster, its servers' data gone (a new cluster in its place), and
// `snapshot restore` bring every job and token back; a file that is no
// backup is refused as bad input and changes nothing.
func TestSnapshotSaveAndRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two multi-process clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	start := func(name string) *testCluster {
		t.Helper()
		c := startCluster(ctx, t, launch.Options{Dir: filepath.Join(t.TempDir(), name),
			Servers: 3, NoAgents: true, Interval: 500 * time.Millisecond, LogLevel: "warn"})
		t.Cleanup(func() { _ = c.Stop() })
		if _, _, err := c.Leader(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cli := func(c *testCluster, secret string, args ...string) (int, string) {
		t.Helper()
		return runOut(append(append(args, clientFlags(c.Cluster, secret, c.Servers)...), "--timeout", "30s")...)
	}
	jobs := func(c *testCluster, secret string) []string {
		t.Helper()
		code, out := cli(c, secret, "jobs", "--json")
		var js []api.Job
		if code != 0 || json.Unmarshal([]byte(out), &js) != nil {
			t.Fatalf("jobs: %d %s", code, out)
		}
		var ids []string
		for _, j := range js {
			ids = append(ids, j.ID)
		}
		slices.Sort(ids)
		return ids
	}
	dir := t.TempDir()
	old := start("old")
	for _, name := range []string{"j1", "j2"} {
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte("name: "+name+"\napplication: cifar10\nmax_replicas: 4\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := cli(old, old.AdminToken(), "submit", f); code != 0 {
			t.Fatalf("submit %s: %d %s", name, code, out)
		}
	}
	backup := filepath.Join(dir, "pollux.snap")
	if code, out := cli(old, old.AdminToken(), "operator", "snapshot", "save", backup); code != 0 || !strings.Contains(out, "saved") {
		t.Fatalf("snapshot save: %d %s", code, out)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v", fi, err)
	}
	oldAdmin := old.AdminToken()
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}

	fresh := start("new")
	junk := filepath.Join(dir, "junk.snap")
	if err := os.WriteFile(junk, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := cli(fresh, fresh.AdminToken(), "operator", "snapshot", "restore", junk); code != 2 || !strings.Contains(out, "not a snapshot") {
		t.Errorf("restore of a junk file: %d %s", code, out)
	}
	if ids := jobs(fresh, fresh.AdminToken()); len(ids) != 0 {
		t.Fatalf("the new cluster has jobs %v", ids)
	}
	if code, out := cli(fresh, fresh.AdminToken(), "operator", "snapshot", "restore", backup); code != 0 || !strings.Contains(out, "2 jobs") {
		t.Fatalf("snapshot restore: %d %s", code, out)
	}
	// The backup's tokens came back with it: the old admin token reads
	// every job through any server.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ids := jobs(fresh, oldAdmin); slices.Equal(ids, []string{"j1", "j2"}) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("jobs after the restore: %v", ids)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
