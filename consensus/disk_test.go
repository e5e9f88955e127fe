package consensus

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// steadyConfig is testConfig with timeouts four times as long, for tests
// about what a cluster keeps rather than how fast it elects: on a loaded
// machine (the race detector, two cores) the 50 ms leader lease lapses
// and a write in flight fails with leadership lost.
func steadyConfig(id raft.ServerID) Config {
	c := testConfig(id)
	c.HeartbeatTimeout *= 4
	c.ElectionTimeout *= 4
	c.LeaderLeaseTimeout *= 4
	return c
}

// TestRestartFromDisk stops every server of a bolt-backed cluster and
// reopens each on its data directory: the cluster re-elects and serves
// the same state, from a snapshot plus the log after it.
func TestRestartFromDisk(t *testing.T) {
	root := t.TempDir()
	fwd := NewLocalForwarder()
	ids := []raft.ServerID{"d0", "d1", "d2"}
	var servers []raft.Server
	for _, id := range ids {
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(id)})
	}
	start := func() *cluster {
		c := &cluster{t: t, fwd: fwd, cfg: steadyConfig}
		for _, id := range ids {
			m := &member{id: id}
			m.addr, m.trans = newTransport(id)
			c.members = append(c.members, m)
		}
		c.connectAll()
		for _, m := range c.members {
			s, err := OpenDisk(steadyConfig(m.id), filepath.Join(root, string(m.id)), m.trans, fwd)
			if err != nil {
				t.Fatal(err)
			}
			m.srv = s
			fwd.Add(s)
			t.Cleanup(func() { _ = s.Shutdown() })
		}
		// Bootstrapping again on restart is a no-op.
		if err := c.members[0].srv.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := start()
	l := c.leader(c.members...)
	workload(t, l.srv, l.srv)
	if err := l.srv.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	// Entries after the snapshot must come back from the log.
	if err := l.srv.SubmitJob(ctxT(t, 5*time.Second), "after-snapshot", testSpec(), 7); err != nil {
		t.Fatal(err)
	}
	want := encodingOf(t, l.srv)
	for _, m := range c.members {
		if err := m.srv.Shutdown(); err != nil {
			t.Fatal(err)
		}
	}

	c = start()
	l = c.leader(c.members...)
	if got := encodingOf(t, l.srv); !bytes.Equal(got, want) {
		t.Fatal("state after restart differs")
	}
	for _, m := range c.members {
		poll.Until(t, 5*time.Second, fmt.Sprintf("%s to catch up", m.id), func() bool {
			return bytes.Equal(state.EncodeState(m.srv.LocalState()), want)
		})
	}
}

func TestOpenDiskErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	_, trans := raft.NewInmemTransport("x")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDisk(testConfig("x"), filepath.Join(file, "sub"), trans, nil); err == nil {
		t.Fatal("a data dir under a file opened")
	}
	if _, err := OpenDisk(Config{}, t.TempDir(), trans, nil); err == nil {
		t.Fatal("a server without id started")
	}
}

// TestTCPGarbage sends garbage to the Raft TCP port of a bolt-backed
// single-server cluster: the connection is dropped and the server keeps
// committing.
func TestTCPGarbage(t *testing.T) {
	cfg := testConfig("t0")
	trans, err := ListenTCP("127.0.0.1:0", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenDisk(cfg, t.TempDir(), trans, trans.Forwarder())
	if err != nil {
		_ = trans.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	if err := s.Bootstrap([]raft.Server{{ID: "t0", Address: trans.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	if err := s.RegisterNode(ctx, state.Node{ID: "n", GPUs: 1}); err != nil {
		t.Fatal(err)
	}
	for _, junk := range [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), {0, 0xff, 0xfe, 1, 2, 3}, bytes.Repeat([]byte{0x01}, 4096)} {
		conn, err := net.Dial("tcp", string(trans.LocalAddr()))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(junk)
		_ = conn.Close()
	}
	if err := s.MarkNode(ctx, "n", state.Dead); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Read(ctx); err != nil || st.Nodes["n"].Health != state.Dead {
		t.Fatalf("after garbage: %v, %v", st, err)
	}
}

// TestDiskModes opens a server on a data directory others may enter, takes
// a snapshot and checks that every directory is 0700 and every file 0600,
// hashicorp/raft's snapshot files included.
func TestDiskModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("m0")
	addr, trans := raft.NewInmemTransport("m0")
	s, err := OpenDisk(cfg, dir, trans, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	if err := s.Bootstrap([]raft.Server{{ID: "m0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	poll.Until(t, 10*time.Second, "a leader", func() bool { return s.Raft().State() == raft.Leader })
	if err := s.RegisterNode(ctx, state.Node{ID: "n", GPUs: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	var files int
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			files++
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 { // raft.db, state.bin, meta.json
		t.Fatalf("%d files under the data directory, want the database and a snapshot", files)
	}
}
