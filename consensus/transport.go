package consensus

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"pollux/consensus/state"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"pollux/cluster/pki"
)

// Connection types: the first byte a dialer writes on the Raft port,
// after the TLS handshake (Nomad's RPC port works the same way).
const (
	connRaft    byte = 1 // hashicorp/raft's RPC stream follows
	connForward byte = 2 // one forwarded write batch follows (frames below)
)

// Deadlines of the Raft port.
const (
	// typeTimeout bounds the wait for a connection's type byte.
	typeTimeout = 10 * time.Second
	// frameTimeout bounds reading a forwarded request or writing its
	// answer.
	frameTimeout = 30 * time.Second
)

// Forward answers: a status byte, then the encoded results (forwardOK)
// or an error message (forwardRefused).
const (
	forwardOK      byte = 0
	forwardRefused byte = 1
)

// TLS secures the Raft port: Server is the listener's configuration and
// Client the dialer's (pki's ChannelRaft configurations: only server
// certificates of the cluster CA, on both sides). Gate, if set, admits
// connections before their handshake (default: pki's, without members).
type TLS struct {
	Server, Client *tls.Config
	Gate           *pki.Gate
}

// Transport is a server's Raft port: hashicorp/raft's network transport
// and the forwarding of followers' writes to the leader, multiplexed on
// one listener by the first byte of every connection (connRaft,
// connForward), over TLS unless the server runs insecure. Pass it to
// OpenDisk with Forwarder(); the server then answers forwarded writes on
// it.
type Transport struct {
	*raft.NetworkTransport
	mux *mux
	// hb guards Raft's heartbeat fast path against Close (see
	// SetHeartbeatHandler); hbClosed is set by Close.
	hb       sync.RWMutex
	hbClosed bool
}

// SetHeartbeatHandler hands Raft's heartbeat fast path to cb until
// Close. The transport runs cb on the connection's goroutine, outside
// Raft's main loop, so a heartbeat that arrives as the server shuts
// down can still be writing the new term to the stable store when
// Server.Shutdown closes it, and Raft panics on a store it cannot
// write. Close waits for a heartbeat being handled and refuses those
// after it.
func (t *Transport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(func(rpc raft.RPC) {
		t.hb.RLock()
		defer t.hb.RUnlock()
		if t.hbClosed {
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		cb(rpc)
	})
}

// Close closes the port once no heartbeat is being handled.
func (t *Transport) Close() error {
	t.hb.Lock()
	t.hbClosed = true
	t.hb.Unlock()
	// Every connection goes with the port, as when the process ends:
	// the peers' reads end at once (see watchLeaderLoss).
	t.NetworkTransport.CloseStreams()
	return t.NetworkTransport.Close()
}

// ListenTCP returns the Raft port bound to addr (host:port; port 0 picks
// a free one, read it from LocalAddr). The advertised address is the
// bound one, so bind to a concrete host such as 127.0.0.1. A nil tlsCfg
// means plaintext (insecure mode).
func ListenTCP(addr string, cfg Config, tlsCfg *TLS) (*Transport, error) {
	cfg = cfg.withDefaults()
	if tlsCfg != nil && (tlsCfg.Server == nil || tlsCfg.Client == nil) {
		return nil, fmt.Errorf("%w: TLS needs a server and a client configuration", state.ErrInvalid)
	}
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("consensus: raft transport on %s: %w", addr, err)
	}
	if ta, ok := inner.Addr().(*net.TCPAddr); !ok || ta.IP.IsUnspecified() {
		inner.Close()
		return nil, fmt.Errorf("%w: raft address %s is not advertisable: bind to a concrete host", state.ErrInvalid, inner.Addr())
	}
	m := &mux{inner: inner, ln: inner, log: cfg.Logger, raftConns: make(chan net.Conn), done: make(chan struct{}),
		conns: map[net.Conn]struct{}{}, ended: make(chan struct{}, 1)}
	if tlsCfg != nil {
		m.client = tlsCfg.Client
		m.ln = pki.NewListener(inner, tlsCfg.Server, pki.ListenerOptions{Channel: pki.ChannelRaft, Logger: cfg.Logger, Gate: tlsCfg.Gate})
	}
	m.wg.Add(1)
	go m.accept()
	// MaxRPCsInFlight 1 turns raft's pipelined replication off: when a
	// follower refuses an AppendEntries (a log it lacks), the pipeline's
	// sender and response decoder can block on each other for good, so
	// that the leader sends that follower heartbeats but no entry again
	// and its Shutdown never returns (hashicorp/raft#612; seen here as a
	// server needing SIGKILL after its SIGTERM in `pollux chaos
	// --scenario loss`). Without it every AppendEntries waits for its
	// answer, which HashiCorp measured to cost little (raft PR #541).
	t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: m, MaxPool: 3, Timeout: 2 * time.Second, MaxRPCsInFlight: 1, Logger: newHCLogger(cfg.Logger, cfg.RaftLogLevel),
	})
	return &Transport{NetworkTransport: t, mux: m}, nil
}

// Forwarder forwards a follower's writes to the leader's Raft port.
func (t *Transport) Forwarder() Forwarder { return t.mux }

// serveForwards makes s answer the writes forwarded to this port (called
// by NewServer).
func (t *Transport) serveForwards(s *Server) { t.mux.srv.Store(s) }

// mux is the raft.StreamLayer of Transport and its forwarder.
type mux struct {
	inner     net.Listener // the TCP listener
	ln        net.Listener // inner, or the TLS listener over it
	client    *tls.Config  // nil: plaintext
	log       *slog.Logger
	srv       atomic.Pointer[Server]
	raftConns chan net.Conn
	// ended gets a token when a Raft connection a peer opened ends
	// (endWatch): a leader's connections end when its process does.
	ended     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // being typed or forwarding
}

var _ raft.StreamLayer = (*mux)(nil)

func (m *mux) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			m.log.Warn("consensus: raft port accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !m.track(c) {
			c.Close()
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.handle(c)
		}()
	}
}

// track records a connection being handled; false once closed.
func (m *mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conns == nil {
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *mux) untrack(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, c)
}

// handle reads a connection's type and hands it to Raft or serves the
// forwarded write on it.
func (m *mux) handle(c net.Conn) {
	handedOver := false
	defer func() {
		m.untrack(c)
		if !handedOver {
			c.Close()
		}
	}()
	var typ [1]byte
	_ = c.SetReadDeadline(time.Now().Add(typeTimeout))
	if _, err := io.ReadFull(c, typ[:]); err != nil {
		m.refuse(c, fmt.Errorf("no connection type: %w", err))
		return
	}
	switch typ[0] {
	case connRaft:
		_ = c.SetReadDeadline(time.Time{})
		select {
		case m.raftConns <- c:
			handedOver = true
		case <-m.done:
		}
	case connForward:
		m.serveForward(c)
	default:
		m.refuse(c, fmt.Errorf("unknown connection type %#x", typ[0]))
	}
}

// refuse logs one refused connection, naming the peer.
func (m *mux) refuse(c net.Conn, err error) {
	select {
	case <-m.done:
		return
	default:
	}
	m.log.Warn("consensus: refused connection", "channel", pki.ChannelRaft, "peer", c.RemoteAddr().String(), "identity", peerIdentity(c), "err", err.Error())
}

// peerIdentity is the identity of a TLS peer's certificate ("" without).
func peerIdentity(c net.Conn) string {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return ""
	}
	cs := tc.ConnectionState()
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	id, err := pki.IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id.String()
}

// serveForward answers one forwarded write batch.
func (m *mux) serveForward(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(frameTimeout))
	req, err := readFrame(c, maxForward)
	if err != nil {
		m.refuse(c, fmt.Errorf("forwarded write: %w", err))
		return
	}
	s := m.srv.Load()
	var resp []byte
	if s == nil {
		// Not serving yet: certainly not the leader, nothing applied.
		resp, err = notLeaderResponse(req)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
		resp, err = s.serveForward(ctx, req)
		cancel()
	}
	answer := append([]byte{forwardOK}, resp...)
	if err != nil {
		m.refuse(c, fmt.Errorf("forwarded write: %w", err))
		answer = append([]byte{forwardRefused}, truncate(err.Error(), maxErrorText)...)
	}
	_ = c.SetWriteDeadline(time.Now().Add(frameTimeout))
	_ = writeFrame(c, answer)
}

// notLeaderResponse answers every command of req with ErrNotLeader.
func notLeaderResponse(req []byte) ([]byte, error) {
	cmds, err := decodeRequest(req)
	if err != nil {
		return nil, err
	}
	res := make([]Result, len(cmds))
	for i := range res {
		res[i].Err = ErrNotLeader
	}
	return encodeResponse(res), nil
}

// Forward implements Forwarder: it dials the leader's Raft port, sends
// the batch and reads the answer. The leader's address is the one this
// server's Raft knows; if the leader changed meanwhile, nothing is sent
// (ErrNoLeader, so the caller retries).
func (m *mux) Forward(ctx context.Context, leader raft.ServerID, req []byte) ([]byte, error) {
	s := m.srv.Load()
	if s == nil {
		return nil, fmt.Errorf("%w: transport not serving", ErrNoLeader)
	}
	id, addr := s.Leader()
	if id != leader || addr == "" {
		return nil, fmt.Errorf("%w: leader is now %q, not %q", ErrNoLeader, id, leader)
	}
	if len(req) > maxForward {
		return nil, fmt.Errorf("%w: request of %d bytes over %d", state.ErrInvalid, len(req), maxForward)
	}
	c, err := m.dialType(ctx, string(addr), connForward)
	if err != nil {
		return nil, fmt.Errorf("%w: leader %q at %s unreachable: %w", ErrNoLeader, leader, addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := writeFrame(c, req); err != nil {
		return nil, fmt.Errorf("%w: sending to %q: %w", ErrForward, leader, err)
	}
	answer, err := readFrame(c, maxForward+1)
	if err != nil {
		return nil, fmt.Errorf("%w: answer of %q: %w", ErrForward, leader, err)
	}
	if answer[0] != forwardOK {
		return nil, fmt.Errorf("%w: leader %q refused: %s", ErrForward, leader, answer[1:])
	}
	return answer[1:], nil
}

// dialType connects to addr's Raft port (TLS unless insecure) and writes
// the connection type.
func (m *mux) dialType(ctx context.Context, addr string, typ byte) (net.Conn, error) {
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if m.client != nil {
		host, _, _ := net.SplitHostPort(addr)
		cfg := m.client.Clone()
		cfg.ServerName = host
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	if _, err := c.Write([]byte{typ}); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// Dial implements raft.StreamLayer.
func (m *mux) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.dialType(ctx, string(address), connRaft)
}

// Accept implements raft.StreamLayer: Raft's connections, each telling
// ended when it ends.
func (m *mux) Accept() (net.Conn, error) {
	select {
	case c := <-m.raftConns:
		return &endWatch{Conn: c, ended: m.ended}, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close stops the port: the listener and every connection not yet handed
// to Raft (Raft closes its own).
func (m *mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.ln.Close()
		m.mu.Lock()
		for c := range m.conns {
			c.Close()
		}
		m.conns = nil
		m.mu.Unlock()
	})
	return err
}

// endWatch is a Raft connection accepted from a peer that puts a token
// in ended (without waiting) the first time a read fails: the peer
// closed it, or its process ended.
type endWatch struct {
	net.Conn
	ended chan<- struct{}
	once  atomic.Bool
}

func (c *endWatch) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.once.CompareAndSwap(false, true) {
		select {
		case c.ended <- struct{}{}:
		default:
		}
	}
	return n, err
}

// Addr implements raft.StreamLayer: the bound (and advertised) address.
func (m *mux) Addr() net.Addr { return m.inner.Addr() }

// --- frames ------------------------------------------------------------------

// A frame is a 4-byte big-endian length (at least 1) and that many bytes.

// writeFrame writes b as one frame.
func writeFrame(w io.Writer, b []byte) error {
	buf := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	_, err := w.Write(append(buf, b...))
	return err
}

// readFrame reads one frame of at most limit bytes. The buffer grows as
// bytes arrive, so a length that lies costs nothing.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: frame header: %w", state.ErrMalformed, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || uint64(n) > uint64(limit) {
		return nil, fmt.Errorf("%w: frame of %d bytes (want 1 to %d)", state.ErrMalformed, n, limit)
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, fmt.Errorf("%w: frame: %w", state.ErrMalformed, err)
	}
	if len(b) != int(n) {
		return nil, fmt.Errorf("%w: frame truncated at %d of %d bytes", state.ErrMalformed, len(b), n)
	}
	return b, nil
}
