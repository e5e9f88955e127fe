package consensus

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A leader whose data directory is nearly full refuses writes at once
// with ErrNoSpace (also those a follower forwards), applies nothing of
// them and keeps its leadership; with space back, writes go through.
func TestFullDiskRefusesWrites(t *testing.T) {
	var free atomic.Uint64
	free.Store(64 << 20)
	c := &cluster{t: t, fwd: NewLocalForwarder(), cfg: testConfig}
	var servers []raft.Server
	for i := range 3 {
		m := &member{id: raft.ServerID(fmt.Sprintf("d%d", i)), store: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
		m.addr, m.trans = newTransport(m.id)
		c.members = append(c.members, m)
		servers = append(servers, raft.Server{ID: m.id, Address: m.addr})
	}
	c.connectAll()
	for _, m := range c.members {
		s, err := NewServer(testConfig(m.id), Stores{Transport: m.trans, Logs: m.store, Stable: m.store, Snapshots: m.snaps,
			Forwarder: c.fwd, FreeSpace: func() (uint64, error) { return free.Load(), nil }})
		if err != nil {
			t.Fatal(err)
		}
		m.srv = s
		c.fwd.Add(s)
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	if err := c.members[0].srv.Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	l := c.leader(c.members...)
	f := c.followers(l)[0]
	ctx := ctxT(t, 5*time.Second)
	if err := l.srv.SubmitJob(ctx, "before", testSpec(), 1); err != nil {
		t.Fatal(err)
	}
	term, _ := l.srv.Leadership()
	free.Store(100 << 10)
	for _, s := range []*Server{l.srv, f.srv} {
		begin := time.Now()
		err := s.SubmitJob(ctx, "full-"+string(s.ID()), testSpec(), 2)
		if !errors.Is(err, ErrNoSpace) || time.Since(begin) > time.Second {
			t.Errorf("%s on a full disk: %v after %v, want ErrNoSpace at once", s.ID(), err, time.Since(begin))
		}
	}
	st, err := l.srv.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 1 || st.Jobs["before"] == nil {
		t.Errorf("jobs after refused writes: %v", st.JobIDs())
	}
	if now, leader := l.srv.Leadership(); !leader || now != term {
		t.Errorf("leadership after refused writes: term %d (was %d), leader %v", now, term, leader)
	}
	free.Store(64 << 20)
	if err := f.srv.SubmitJob(ctx, "after", testSpec(), 3); err != nil {
		t.Errorf("with space back: %v", err)
	}
}
