package consensus

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

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
		c := &cluster{t: t, fwd: fwd, cfg: testConfig}
		for _, id := range ids {
			m := &member{id: id}
			m.addr, m.trans = newTransport(id)
			c.members = append(c.members, m)
		}
		c.connectAll()
		for _, m := range c.members {
			s, err := OpenDisk(testConfig(m.id), filepath.Join(root, string(m.id)), m.trans, fwd)
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
		waitFor(t, 5*time.Second, fmt.Sprintf("%s to catch up", m.id), func() bool {
			return bytes.Equal(EncodeState(m.srv.LocalState()), want)
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
