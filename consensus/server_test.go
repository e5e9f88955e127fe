package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"pollux/consensus/state"
	"pollux/internal/poll"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testConfig has short timeouts, still long enough not to flap under the
// race detector on a loaded machine.
func testConfig(id raft.ServerID) Config {
	c := DefaultConfig(id)
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.WriteTimeout = 3 * time.Second
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

// member is one server of an in-memory test cluster.
type member struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	trans *raft.InmemTransport
	srv   *Server
	// store, stable, snaps survive a restart of the member.
	store *raft.InmemStore
	snaps *raft.InmemSnapshotStore
}

type cluster struct {
	t       testing.TB
	fwd     *LocalForwarder
	members []*member
	cfg     func(raft.ServerID) Config
}

// newCluster starts n servers over the in-memory transport and waits for
// a leader.
func newCluster(t testing.TB, n int, cfg func(raft.ServerID) Config) *cluster {
	t.Helper()
	if cfg == nil {
		cfg = testConfig
	}
	c := &cluster{t: t, fwd: NewLocalForwarder(), cfg: cfg}
	var servers []raft.Server
	for i := range n {
		m := &member{id: raft.ServerID(fmt.Sprintf("s%d", i)), store: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
		m.addr, m.trans = newTransport(m.id)
		c.members = append(c.members, m)
		servers = append(servers, raft.Server{ID: m.id, Address: m.addr})
	}
	c.connectAll()
	for _, m := range c.members {
		c.start(m)
	}
	if err := c.members[0].srv.Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	c.leader(c.members...)
	return c
}

// newTransport returns an in-memory transport whose RPCs time out after
// a second (the library's 5 s default makes a shutdown wait that long for
// an RPC to a removed server).
func newTransport(id raft.ServerID) (raft.ServerAddress, *raft.InmemTransport) {
	return raft.NewInmemTransportWithTimeout(raft.ServerAddress(id), time.Second)
}

func (c *cluster) start(m *member) {
	c.t.Helper()
	s, err := NewServer(c.cfg(m.id), Stores{Transport: m.trans, Logs: m.store, Stable: m.store, Snapshots: m.snaps, Forwarder: c.fwd})
	if err != nil {
		c.t.Fatal(err)
	}
	m.srv = s
	c.fwd.Add(s)
	c.t.Cleanup(func() { _ = s.Shutdown() })
}

func (c *cluster) connectAll() {
	for _, a := range c.members {
		for _, b := range c.members {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// isolate cuts m off from every other member, both ways, and from
// forwarded writes.
func (c *cluster) isolate(m *member) {
	m.trans.DisconnectAll()
	for _, o := range c.members {
		if o != m {
			o.trans.Disconnect(m.addr)
		}
	}
	c.fwd.SetReachable(m.id, false)
}

func (c *cluster) heal() {
	c.connectAll()
	for _, m := range c.members {
		c.fwd.SetReachable(m.id, true)
	}
}

// leader waits until one of ms is leader and serves a linearizable read.
func (c *cluster) leader(ms ...*member) *member {
	c.t.Helper()
	var found *member
	poll.Until(c.t, 10*time.Second, "a leader", func() bool {
		for _, m := range ms {
			if m.srv.Raft().State() == raft.Leader {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := m.srv.Read(ctx)
				cancel()
				if err == nil {
					found = m
					return true
				}
			}
		}
		return false
	})
	return found
}

func (c *cluster) followers(leader *member) []*member {
	var fs []*member
	for _, m := range c.members {
		if m != leader {
			fs = append(fs, m)
		}
	}
	return fs
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// workload writes a small scheduler history through s.
func workload(t *testing.T, s *Server, leader *Server) {
	t.Helper()
	ctx := ctxT(t, 5*time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.RegisterNode(ctx, state.Node{ID: "n1", Addresses: []string{"127.0.0.1:9001"}, Rack: "a", GPUs: 4}))
	must(s.RegisterNode(ctx, state.Node{ID: "n2", Addresses: []string{"127.0.0.1:9002"}, Rack: "b", GPUs: 4}))
	must(s.SubmitJob(ctx, "j1", testSpec(), 1))
	must(s.SubmitJob(ctx, "j2", testSpec(), 2))
	term, ok := leader.Leadership()
	if !ok {
		t.Fatal("leader is not leader")
	}
	must(commitAllocation(ctx, s, 1, term, map[string][]state.Slot{"j1": {{Node: "n1", GPUs: 2}, {Node: "n2", GPUs: 2}}, "j2": {{Node: "n1", GPUs: 1}}}))
	must(s.single(ctx, &state.RecordProfile{ID: "j1", Incarnation: 1, Entries: []state.ProfileEntry{entry(2, 4, 64, 0.1, 0.15, 10)}, HasGrad: true}))
	must(s.single(ctx, &state.UpdateJob{ID: "j1", Incarnation: 1, Set: state.UpdateAttained | state.UpdateProgress, Attained: 12, Progress: 0.1}))
	must(s.MarkNode(ctx, "n2", state.Suspect))
}

func encodingOf(t *testing.T, s *Server) []byte {
	t.Helper()
	st, err := s.Read(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return state.EncodeState(st)
}

func TestLeaderLossNewLeaderIdenticalState(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader(c.members...)
	// Writes through a follower are forwarded.
	workload(t, c.followers(old)[0].srv, old.srv)
	want := encodingOf(t, old.srv)

	if err := old.srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	c.isolate(old)
	nl := c.leader(c.followers(old)...)
	if got := encodingOf(t, nl.srv); !bytes.Equal(got, want) {
		t.Fatal("the new leader's state differs from the old leader's")
	}
	// The new leader continues the generation sequence in its own term.
	term, _ := nl.srv.Leadership()
	ctx := ctxT(t, 5*time.Second)
	if err := commitAllocation(ctx, nl.srv, 2, term, map[string][]state.Slot{"j1": {{Node: "n1", GPUs: 4}}}); err != nil {
		t.Fatal(err)
	}
	st, err := nl.srv.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Allocation.Generation != 2 || st.Jobs["j1"].Incarnation != 2 || st.Jobs["j1"].Restarts != 1 {
		t.Fatalf("after failover: allocation %+v, j1 %+v", st.Allocation, st.Jobs["j1"])
	}
}

func TestPartitionedMinorityCannotCommit(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader(c.members...)
	workload(t, old.srv, old.srv)
	c.isolate(old)

	// The isolated leader cannot commit, however long it tries.
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	err := old.srv.SubmitJob(ctx, "lost", testSpec(), 3)
	cancel()
	if err == nil {
		t.Fatal("an isolated leader committed a write")
	}
	t.Logf("isolated write: %v", err)

	// The majority elects a leader and commits.
	nl := c.leader(c.followers(old)...)
	var via *member
	for _, m := range c.followers(nl) {
		if m != old {
			via = m
		}
	}
	if err := via.srv.SubmitJob(ctxT(t, 5*time.Second), "kept", testSpec(), 4); err != nil {
		t.Fatal(err)
	}
	want := encodingOf(t, nl.srv)

	c.heal()
	poll.Until(t, 10*time.Second, "the old leader to catch up", func() bool {
		return bytes.Equal(state.EncodeState(old.srv.LocalState()), want)
	})
	st := old.srv.LocalState()
	if _, ok := st.Jobs["lost"]; ok {
		t.Fatal("the minority's write survived the partition")
	}
	if _, ok := st.Jobs["kept"]; !ok {
		t.Fatal("the majority's write is missing")
	}
}

func TestDeposedLeaderAllocationRejected(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader(c.members...)
	workload(t, old.srv, old.srv)
	oldTerm, ok := old.srv.Leadership()
	if !ok {
		t.Fatal("no leadership")
	}
	c.isolate(old)
	nl := c.leader(c.followers(old)...)
	newTerm, _ := nl.srv.Leadership()
	if newTerm <= oldTerm {
		t.Fatalf("new term %d not above old %d", newTerm, oldTerm)
	}
	ctx := ctxT(t, 5*time.Second)
	if err := commitAllocation(ctx, nl.srv, 2, newTerm, map[string][]state.Slot{"j2": {{Node: "n1", GPUs: 4}}}); err != nil {
		t.Fatal(err)
	}

	// While partitioned, the deposed leader's allocation does not commit.
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := commitAllocation(short, old.srv, 2, oldTerm, map[string][]state.Slot{"j1": {{Node: "n1", GPUs: 1}}})
	cancel()
	if err == nil {
		t.Fatal("a partitioned leader committed an allocation")
	}

	// Once it can reach the new leader, its allocation is forwarded there
	// and fenced by the term, whatever generation it claims.
	c.heal()
	var cur *member
	poll.Until(t, 10*time.Second, "the old leader to follow a new one", func() bool {
		id, _ := old.srv.Leader()
		if old.srv.Raft().State() != raft.Follower || id == "" || id == old.id {
			return false
		}
		for _, m := range c.members {
			if m.id == id {
				cur = m
			}
		}
		return true
	})
	// (fresh deadlines: the waits above may have used up the first one
	// on a loaded machine)
	ctx = ctxT(t, 5*time.Second)
	for _, gen := range []uint64{2, 3, 100} {
		err := commitAllocation(ctx, old.srv, gen, oldTerm, map[string][]state.Slot{"j1": {{Node: "n1", GPUs: 1}}})
		if !errors.Is(err, state.ErrStaleTerm) {
			t.Fatalf("generation %d from the deposed leader: %v, want ErrStaleTerm", gen, err)
		}
	}
	// A current-term allocation with an old generation is fenced too.
	cur = c.leader(cur)
	ctx = ctxT(t, 5*time.Second)
	curTerm, _ := cur.srv.Leadership()
	if err := commitAllocation(ctx, cur.srv, 2, curTerm, map[string][]state.Slot{"j1": {{Node: "n1", GPUs: 1}}}); !errors.Is(err, state.ErrStaleGeneration) {
		t.Fatalf("repeated generation: %v, want ErrStaleGeneration", err)
	}
	st, err := cur.srv.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Allocation.Generation != 2 || st.Allocation.Term != newTerm || len(st.Allocation.Jobs) != 1 {
		t.Fatalf("allocation %+v", st.Allocation)
	}
}

func TestSnapshotInstalledOnNewVoter(t *testing.T) {
	cfg := func(id raft.ServerID) Config {
		c := testConfig(id)
		c.TrailingLogs = 1
		return c
	}
	c := newCluster(t, 3, cfg)
	l := c.leader(c.members...)
	workload(t, l.srv, l.srv)
	if err := l.srv.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	// A new server can only catch up from the snapshot: the log before it
	// is gone.
	m := &member{id: "s3", store: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()}
	m.addr, m.trans = newTransport("s3")
	c.members = append(c.members, m)
	c.connectAll()
	c.start(m)
	ctx := ctxT(t, 5*time.Second)
	if err := l.srv.AddVoter(ctx, m.id, m.addr); err != nil {
		t.Fatal(err)
	}
	want := encodingOf(t, l.srv)
	poll.Until(t, 10*time.Second, "the new voter to restore", func() bool {
		return bytes.Equal(state.EncodeState(m.srv.LocalState()), want)
	})
	servers, err := l.srv.Servers()
	if err != nil || len(servers) != 4 {
		t.Fatalf("configuration %v, %v", servers, err)
	}
	if err := l.srv.RemoveServer(ctx, m.id); err != nil {
		t.Fatal(err)
	}
	if servers, _ := l.srv.Servers(); len(servers) != 3 {
		t.Fatalf("after removal: %v", servers)
	}
}

func TestFollowerReadAndConfigChangeRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(c.members...)
	f := c.followers(l)[0]
	ctx := ctxT(t, 5*time.Second)
	if _, err := f.srv.Read(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower read: %v", err)
	}
	if err := f.srv.RemoveServer(ctx, l.id); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("follower config change: %v", err)
	}
	if _, err := f.srv.Apply(ctx, &state.SubmitJob{ID: "bad id"}); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("invalid command: %v", err)
	}
	// A state-machine refusal comes back through forwarding with its
	// sentinel.
	if err := f.srv.MarkNode(ctx, "ghost", state.Dead); !errors.Is(err, state.ErrUnknownNode) {
		t.Fatalf("forwarded refusal: %v", err)
	}
	if err := f.srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.MarkNode(ctx, "ghost", state.Dead); !errors.Is(err, ErrShutdown) {
		t.Fatalf("after shutdown: %v", err)
	}
}

func TestBatchPipelined(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(c.members...)
	ctx := ctxT(t, 10*time.Second)
	if err := l.srv.RegisterNode(ctx, state.Node{ID: "n", GPUs: 8}); err != nil {
		t.Fatal(err)
	}
	if err := l.srv.SubmitJob(ctx, "j", testSpec(), 0); err != nil {
		t.Fatal(err)
	}
	term, _ := l.srv.Leadership()
	for _, via := range []*Server{l.srv, c.followers(l)[0].srv} {
		st := l.srv.LocalState()
		var cmds []state.Command
		for g := range 50 {
			cmds = append(cmds, &state.CommitAllocation{Generation: st.Allocation.Generation + uint64(g) + 1, Term: term,
				Jobs: map[string][]state.Slot{"j": {{Node: "n", GPUs: 1 + g%8}}}})
		}
		res, err := via.Apply(ctx, cmds...)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil || (i > 0 && r.Index <= res[i-1].Index) {
				t.Fatalf("result %d: %+v", i, r)
			}
		}
	}
	st, err := l.srv.Read(ctx)
	if err != nil || st.Allocation.Generation != 100 {
		t.Fatalf("generation after two batches: %v, %v", st.Allocation.Generation, err)
	}
}

func TestForwardEncodingErrors(t *testing.T) {
	res := []Result{{Index: 3}, {Index: 4, Err: fmt.Errorf("x: %w", state.ErrStaleTerm)}, {Err: errors.New("plain \xff")}}
	got, err := decodeResponse(encodeResponse(res), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Index != 3 || got[0].Err != nil || !errors.Is(got[1].Err, state.ErrStaleTerm) || got[1].Err.Error() != "x: state: stale leader term" || got[2].Err == nil {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := decodeResponse(encodeResponse(res), 2); !errors.Is(err, state.ErrMalformed) {
		t.Fatalf("count mismatch: %v", err)
	}
	if _, err := decodeRequest([]byte{9, 0}); !errors.Is(err, state.ErrUnknownVersion) {
		t.Fatalf("request version: %v", err)
	}
}

func FuzzDecodeForward(f *testing.F) {
	f.Add(encodeRequest([][]byte{{1, 7, 1, 'n', 3}}))
	f.Add(encodeResponse([]Result{{Index: 1, Err: state.ErrInvalid}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if cmds, err := decodeRequest(b); err == nil && !bytes.Equal(encodeRequest(cmds), b) {
			t.Fatal("request does not re-encode to itself")
		}
		_, _ = decodeResponse(b, 1)
	})
}

// hangingForwarder stands for a leader that was paused: the connection is
// open but no answer ever comes. Each forwarded write is announced on
// reached.
type hangingForwarder struct{ reached chan struct{} }

func (h hangingForwarder) Forward(ctx context.Context, _ raft.ServerID, _ []byte) ([]byte, error) {
	select {
	case h.reached <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A write forwarded to a leader that stops answering gives up as soon as
// the forwarding server learns of a new leader, rather than waiting for
// the old one to come back (or the write's whole timeout).
func TestForwardGivesUpOnLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	old := c.leader(c.members...)
	via := c.followers(old)[0]
	reached := make(chan struct{}, 1)
	via.srv.stores.Forwarder = hangingForwarder{reached: reached}
	done := make(chan error, 1)
	go func() { done <- via.srv.SubmitJob(ctxT(t, 20*time.Second), "late", testSpec(), 1) }()
	// Once the write hangs in the forwarder, depose the leader.
	select {
	case <-reached:
	case err := <-done:
		t.Fatalf("the write returned before reaching the forwarder: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the write never reached the forwarder")
	}
	c.isolate(old)
	nl := c.leader(c.followers(old)...)
	err := <-done
	if !errors.Is(err, ErrForward) || errors.Is(err, ErrTimeout) {
		t.Fatalf("forward to the deposed leader: %v, want ErrForward on the change to %s", err, nl.id)
	}
	t.Logf("gave up with: %v", err)
}

// TestLeaderSeesUnreachablePeersAndNotifies: the leader's failing
// heartbeats name a cut-off follower until it is back; the new leader of
// a cluster hears of its leadership on LeaderChanges; a submission is
// announced on JobsChanged, a round is not.
func TestLeaderSeesUnreachablePeersAndNotifies(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(c.members...)
	f := c.followers(l)[0]
	c.isolate(f)
	c.fwd.SetReachable(f.id, true)
	poll.Until(t, 5*time.Second, "the cut-off follower to be unreachable", func() bool {
		_, ok := l.srv.Unreachable()[f.id]
		return ok
	})
	c.heal()
	poll.Until(t, 5*time.Second, "the follower to be reachable again", func() bool {
		_, ok := l.srv.Unreachable()[f.id]
		return !ok
	})
	select {
	case v := <-l.srv.LeaderChanges():
		if !v {
			t.Fatal("the leader's notification says it lost leadership")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no leadership notification")
	}
	for len(l.srv.JobsChanged()) > 0 {
		<-l.srv.JobsChanged()
	}
	ctx := ctxT(t, 5*time.Second)
	if _, err := l.srv.Apply(ctx, &state.InitCluster{ID: "c", CheckpointRoot: "/r"}); err != nil {
		t.Fatal(err)
	}
	term, _ := l.srv.Leadership()
	if _, err := l.srv.CommitRound(ctx, &state.Round{Generation: 1, Term: term}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.srv.JobsChanged():
		t.Fatal("a round announced as a change of jobs")
	default:
	}
	if err := l.srv.SubmitJob(ctx, "j", testSpec(), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.srv.JobsChanged():
	case <-time.After(time.Second):
		t.Fatal("a submission not announced")
	}
}

// commitAllocation commits an allocation of the first version of the loop
// (still applied, so that older logs replay).
func commitAllocation(ctx context.Context, s *Server, generation, term uint64, jobs map[string][]state.Slot) error {
	return s.single(ctx, &state.CommitAllocation{Generation: generation, Term: term, Jobs: jobs})
}

func TestRegisterNodesBatch(t *testing.T) {
	c := newCluster(t, 3, nil)
	l := c.leader(c.members...)
	ctx := ctxT(t, 10*time.Second)
	tests := []struct {
		name  string
		via   func() *Server
		nodes []state.Node
		bad   []bool // refused nodes
	}{
		{"on the leader", func() *Server { return l.srv },
			[]state.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 8, Health: state.Suspect}}, []bool{false, false}},
		{"forwarded, one invalid", func() *Server { return c.followers(l)[0].srv },
			[]state.Node{{ID: "c", GPUs: 4}, {ID: "d", GPUs: -1}, {ID: "e", GPUs: 2}}, []bool{false, true, false}},
		{"none", func() *Server { return l.srv }, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs, err := tt.via().RegisterNodes(ctx, tt.nodes)
			if err != nil || len(errs) != len(tt.nodes) {
				t.Fatalf("RegisterNodes: %v, %d results for %d nodes", err, len(errs), len(tt.nodes))
			}
			st, err := l.srv.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range tt.nodes {
				got := st.Nodes[n.ID]
				if tt.bad[i] {
					if !errors.Is(errs[i], state.ErrInvalid) || got != nil {
						t.Errorf("node %s: error %v, registered %v; want ErrInvalid, not registered", n.ID, errs[i], got)
					}
					continue
				}
				want := n.Health
				if want == 0 {
					want = state.Alive
				}
				if errs[i] != nil || got == nil || got.GPUs != n.GPUs || got.Health != want {
					t.Errorf("node %s: error %v, registered %+v", n.ID, errs[i], got)
				}
			}
		})
	}
}
