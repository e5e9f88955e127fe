package consensus

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"pollux/consensus/state"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
)

// tlsCluster is three servers over real Raft ports with mutual TLS, in
// memory otherwise.
type tlsCluster struct {
	*cluster
	bundle *pki.Bundle
	logs   *logbuf.Buffer
	ports  map[raft.ServerID]*Transport
	tls    bool
}

func newTLSCluster(t testing.TB) *tlsCluster { return newPortCluster(t, true, testConfig) }

// newPortCluster is three servers over real Raft ports on loopback, with
// mutual TLS or (withTLS false) plaintext.
func newPortCluster(t testing.TB, withTLS bool, base func(raft.ServerID) Config) *tlsCluster {
	t.Helper()
	ids := []string{"t0", "t1", "t2"}
	// t3 is a server that can be added later (addPortMember).
	b, err := pki.DevBundle(t.TempDir(), append(slices.Clone(ids), "t3"), []string{"a0"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	cfgOf := func(id raft.ServerID) Config {
		c := base(id)
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		return c
	}
	tc := &tlsCluster{cluster: &cluster{t: t, cfg: cfgOf}, bundle: b, logs: logs, ports: map[raft.ServerID]*Transport{}, tls: withTLS}
	var servers []raft.Server
	for _, id := range ids {
		m := tc.addPortMember(raft.ServerID(id))
		servers = append(servers, raft.Server{ID: m.id, Address: m.addr})
	}
	if err := tc.members[0].srv.Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	return tc
}

// addPortMember starts server id on a Raft port of its own (not a voter
// until the leader adds it).
func (tc *tlsCluster) addPortMember(id raft.ServerID) *member {
	t := tc.t
	t.Helper()
	var tlsCfg *TLS
	if tc.tls {
		creds, err := tc.bundle.Credentials(string(id))
		if err != nil {
			t.Fatal(err)
		}
		srvCfg, err1 := creds.ServerConfig(pki.ChannelRaft)
		cliCfg, err2 := creds.ClientConfig(pki.ChannelRaft)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		tlsCfg = &TLS{Server: srvCfg, Client: cliCfg}
	}
	trans, err := ListenTCP("127.0.0.1:0", tc.cfg(id), tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	store := raft.NewInmemStore()
	s, err := NewServer(tc.cfg(id), Stores{Transport: trans, Logs: store, Stable: store,
		Snapshots: raft.NewInmemSnapshotStore(), Forwarder: trans.Forwarder()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	m := &member{id: id, addr: trans.LocalAddr(), srv: s}
	tc.members = append(tc.members, m)
	tc.ports[m.id] = trans
	return m
}

// dialAs connects to addr's Raft port showing cert (nil: none; plain:
// no TLS at all) and writes typ and payload, then reads what comes back.
func dialAs(t *testing.T, tc *tlsCluster, addr string, cert *tls.Certificate, plain bool, typ byte, payload []byte) ([]byte, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	var conn net.Conn = c
	if !plain {
		creds, err := tc.bundle.Credentials("t0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{RootCAs: creds.Pool, ServerName: "127.0.0.1"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		tlc := tls.Client(c, cfg)
		if err := tlc.Handshake(); err != nil {
			return nil, err
		}
		conn = tlc
	}
	if _, err := conn.Write(append([]byte{typ}, payload...)); err != nil {
		return nil, err
	}
	return io.ReadAll(conn)
}

// TestRaftPortTLS runs a cluster over TLS Raft ports, forwards writes
// from a follower to the leader over them, and then tries every way in
// that must be refused: an agent's certificate, a client's, none, a
// plaintext connection, an unknown connection type and a garbled forward.
// Each refusal is one log line naming the peer, and the state does not
// change.
func TestRaftPortTLS(t *testing.T) {
	tc := newTLSCluster(t)
	l := tc.leader(tc.members...)
	f := tc.followers(l)[0]
	workload(t, f.srv, l.srv) // every write forwarded to the leader
	if err := f.srv.SubmitJob(ctxT(t, 5*time.Second), "j1", testSpec(), 9); !errors.Is(err, state.ErrJobExists) {
		t.Fatalf("duplicate forwarded over TLS: %v", err)
	}
	before := encodingOf(t, l.srv)

	forged, err := state.Encode(&state.SubmitJob{ID: "forged", Spec: testSpec(), SubmitTime: 1})
	if err != nil {
		t.Fatal(err)
	}
	var frame bytes.Buffer
	_ = writeFrame(&frame, encodeRequest([][]byte{forged}))
	cert := func(name string) *tls.Certificate {
		c, err := tc.bundle.Credentials(name)
		if err != nil {
			t.Fatal(err)
		}
		return &c.Cert
	}
	server := cert("t1")
	addr := string(l.addr)
	cases := []struct {
		name    string
		cert    *tls.Certificate
		plain   bool
		typ     byte
		payload []byte
		log     string // what the refusal line says
	}{
		{"agent certificate on the Raft port", cert("a0"), false, connRaft, bytes.Repeat([]byte{0}, 64), "agent/a0"},
		{"agent certificate forwarding", cert("a0"), false, connForward, frame.Bytes(), "agent/a0"},
		{"client certificate forwarding", cert(pki.DevClient), false, connForward, frame.Bytes(), "client/client"},
		{"no certificate forwarding", nil, false, connForward, frame.Bytes(), "provide a certificate"},
		{"plaintext forwarding", nil, true, connForward, frame.Bytes(), "handshake"},
		{"plaintext Raft RPC", nil, true, connRaft, bytes.Repeat([]byte{1}, 64), "handshake"},
		{"unknown connection type", server, false, 9, nil, "unknown connection type"},
		{"garbled forward", server, false, connForward, []byte{0, 0, 0, 3, 1, 0xff, 0xff}, "forwarded write"},
		{"oversized forward frame", server, false, connForward, []byte{0xff, 0xff, 0xff, 0xff}, "frame of"},
	}
	for _, c := range cases {
		n := len(tc.logs.Lines("refused connection", "peer=127.0.0.1:"))
		got, err := dialAs(t, tc, addr, c.cert, c.plain, c.typ, c.payload)
		if c.typ == connForward && len(got) > 5 && got[4] == forwardOK {
			t.Errorf("%s: the leader answered OK: %q", c.name, got)
		}
		poll.Until(t, 3*time.Second, c.name+" logged", func() bool {
			return len(tc.logs.Lines("refused connection", "peer=127.0.0.1:")) > n
		})
		if k := len(tc.logs.Lines("refused connection", c.log)); k == 0 {
			t.Errorf("%s: no refusal line saying %q (client saw %q, %v)", c.name, c.log, got, err)
		}
		t.Logf("%s: client saw %q, %v", c.name, truncate(string(got), 80), err)
	}
	if len(tc.logs.Lines("refused connection")) != len(cases) {
		t.Errorf("%d refusal lines for %d refused connections", len(tc.logs.Lines("refused connection")), len(cases))
	}
	if after := encodingOf(t, l.srv); !bytes.Equal(after, before) {
		t.Error("a refused connection changed the state")
	}
	// A server certificate that forwards a valid write is answered.
	got, err := dialAs(t, tc, addr, server, false, connForward, frame.Bytes())
	if err != nil || len(got) < 5 || got[4] != forwardOK {
		t.Fatalf("server forward: %q, %v", got, err)
	}
	if _, ok := l.srv.LocalState().Jobs["forged"]; !ok {
		t.Error("a write forwarded with a server certificate was not applied")
	}
	// The cluster still commits.
	if err := f.srv.MarkNode(ctxT(t, 5*time.Second), "n1", state.Dead); err != nil {
		t.Fatal(err)
	}
}

// TestForwardToServerAddedLater: a server that joined the cluster after
// the others started (AddVoter, as `pollux operator raft add-server`
// does) is reached by the followers' forwarded writes once it leads:
// they dial the address Raft's own configuration holds, over TLS, with
// nothing else to configure.
func TestForwardToServerAddedLater(t *testing.T) {
	tc := newTLSCluster(t)
	l := tc.leader(tc.members...)
	ctx := ctxT(t, 10*time.Second)
	workload(t, l.srv, l.srv)
	fresh := tc.addPortMember("t3")
	// On a loaded machine the leadership may move meanwhile: each step
	// is asked of whichever server leads then.
	onLeader(t, tc, func(l *member) error { return l.srv.AddVoter(ctx, fresh.id, fresh.addr) })
	want := encodingOf(t, l.srv)
	poll.Until(t, 10*time.Second, "t3 to catch up", func() bool { return bytes.Equal(state.EncodeState(fresh.srv.LocalState()), want) })
	onLeader(t, tc, func(l *member) error {
		if l == fresh {
			return nil
		}
		return wait(ctx, l.srv.Raft().LeadershipTransferToServer(fresh.id, fresh.addr))
	})
	poll.Until(t, 10*time.Second, "t3 to lead", func() bool {
		_, leads := fresh.srv.Leadership()
		return leads
	})
	for _, f := range tc.followers(fresh) {
		poll.Until(t, 5*time.Second, string(f.id)+" to know the new leader", func() bool {
			id, _ := f.srv.Leader()
			return id == fresh.id
		})
		job := "via-" + string(f.id)
		if err := f.srv.SubmitJob(ctxT(t, 5*time.Second), job, testSpec(), 10); err != nil {
			t.Fatalf("%s forwarding to the added leader: %v", f.id, err)
		}
		if _, ok := fresh.srv.LocalState().Jobs[job]; !ok {
			t.Errorf("the write forwarded by %s is not in the new leader's state", f.id)
		}
	}
}

// onLeader runs op on the leader, again on the new leader while op fails
// because leadership moved, for up to 10 s.
func onLeader(t *testing.T, tc *tlsCluster, op func(*member) error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := op(tc.leader(tc.members...))
		if err == nil {
			return
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}

// TestForwarderRefusesWrongLeader: a forward to a leader other than the
// one Raft knows sends nothing (ErrNoLeader, safe to retry).
func TestForwarderRefusesWrongLeader(t *testing.T) {
	tc := newTLSCluster(t)
	l := tc.leader(tc.members...)
	f := tc.followers(l)[0]
	fwd := tc.ports[f.id].Forwarder()
	if _, err := fwd.Forward(ctxT(t, time.Second), "someone-else", encodeRequest(nil)); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("forward to a stale leader id: %v, want ErrNoLeader", err)
	}
}

func TestListenTCPRefusesUnadvertisable(t *testing.T) {
	if tr, err := ListenTCP("0.0.0.0:0", testConfig("x"), nil); !errors.Is(err, state.ErrInvalid) {
		if tr != nil {
			tr.Close()
		}
		t.Fatalf("ListenTCP on 0.0.0.0: %v, want ErrInvalid", err)
	}
	if _, err := ListenTCP("127.0.0.1:0", testConfig("x"), &TLS{}); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("ListenTCP with an empty TLS: %v", err)
	}
}

// memConn is a net.Conn reading from a fixed input and discarding what
// is written: one connection's bytes for the fuzzer.
type memConn struct {
	r io.Reader
	w bytes.Buffer
}

func (c *memConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *memConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzRaftPortConn feeds arbitrary bytes to the Raft port's connection
// handling (type byte, frame, forwarded request): it must never panic,
// and any answer is one well-formed frame.
func FuzzRaftPortConn(f *testing.F) {
	var ok bytes.Buffer
	ok.WriteByte(connForward)
	_ = writeFrame(&ok, encodeRequest([][]byte{{1, 7, 1, 'n', 3}}))
	f.Add(ok.Bytes())
	f.Add([]byte{connForward, 0, 0, 0, 0})
	f.Add([]byte{connForward, 0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{connRaft, 1, 2, 3})
	f.Add([]byte{7})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &mux{log: slog.New(slog.DiscardHandler), raftConns: make(chan net.Conn), done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
		close(m.done) // a Raft connection is closed instead of handed over
		c := &memConn{r: bytes.NewReader(b)}
		m.handle(c)
		if c.w.Len() == 0 {
			return
		}
		frame, err := readFrame(&c.w, maxForward+1)
		if err != nil || c.w.Len() != 0 {
			t.Fatalf("answer is not one frame: %v, %d bytes left", err, c.w.Len())
		}
		if frame[0] == forwardOK {
			if _, err := decodeResponse(frame[1:], len(mustDecodeRequest(t, b))); err != nil {
				t.Fatalf("OK answer does not decode: %v", err)
			}
		}
	})
}

func mustDecodeRequest(t *testing.T, conn []byte) [][]byte {
	req, err := readFrame(bytes.NewReader(conn[1:]), maxForward)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := decodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	return cmds
}

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	_ = writeFrame(&b, []byte("hello"))
	got, err := readFrame(&b, 5)
	if err != nil || string(got) != "hello" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {0, 0}, {0, 0, 0, 0}, {0, 0, 0, 6, 'a'}, {0, 0, 0, 3, 'a'}} {
		if _, err := readFrame(bytes.NewReader(bad), 5); !errors.Is(err, state.ErrMalformed) {
			t.Errorf("readFrame(%v) = %v, want ErrMalformed", bad, err)
		}
	}

}

// TestCloseWaitsForAHeartbeatBeingHandled: Raft handles heartbeats on
// the transport's connection goroutines; Close must not return while
// one is being handled (Server.Shutdown closes the stores right after,
// and a heartbeat writing its term to a closed store panicked a
// server in the control-plane bench).
func TestCloseWaitsForAHeartbeatBeingHandled(t *testing.T) {
	from, err := ListenTCP("127.0.0.1:0", testConfig("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer from.Close()
	to, err := ListenTCP("127.0.0.1:0", testConfig("b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	to.SetHeartbeatHandler(func(rpc raft.RPC) {
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
	})
	go func() {
		var resp raft.AppendEntriesResponse
		hb := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(from.LocalAddr())}, Term: 1}
		_ = from.AppendEntries("b", to.LocalAddr(), hb, &resp)
	}()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeat never reached the handler")
	}
	closed := make(chan error, 1)
	go func() { closed <- to.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a heartbeat was being handled", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return once the heartbeat was handled")
	}
}
