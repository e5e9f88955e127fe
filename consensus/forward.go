package consensus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
)

// Forwarder carries an encoded batch of writes from a follower to the
// leader, identified by its server id, and returns the leader's encoded
// answer. An error wrapping ErrNoLeader means the request certainly did
// not arrive (the leader is unknown or unreachable), so the follower may
// retry it elsewhere; any other error means it may have been applied.
type Forwarder interface {
	Forward(ctx context.Context, leader raft.ServerID, req []byte) ([]byte, error)
}

// ForwardPath is the HTTP path of ForwardHandler.
const ForwardPath = "/consensus/v1/apply"

// maxForward bounds a forwarded request or response body.
const maxForward = 64 << 20

// ForwardHandler serves writes forwarded by followers' HTTPForwarders:
// POST ForwardPath with the encoded batch as the body. It answers 200 with
// the encoded results; a garbled request gets 400.
func (s *Server) ForwardHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ForwardPath, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxForward+1))
		if err == nil && len(body) > maxForward {
			err = fmt.Errorf("%w: request over %d bytes", ErrMalformed, maxForward)
		}
		var resp []byte
		if err == nil {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WriteTimeout)
			resp, err = s.serveForward(ctx, body)
			cancel()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(resp)
	})
	return mux
}

// HTTPForwarder forwards over HTTP to the leader's ForwardHandler. It
// knows each server's HTTP address by id.
type HTTPForwarder struct {
	client *http.Client
	mu     sync.RWMutex
	peers  map[raft.ServerID]string
}

// NewHTTPForwarder returns a forwarder that reaches server id at
// http://peers[id]. A nil client means a client with no overall timeout
// (the caller's context bounds each request).
func NewHTTPForwarder(client *http.Client, peers map[raft.ServerID]string) *HTTPForwarder {
	if client == nil {
		client = &http.Client{}
	}
	f := &HTTPForwarder{client: client, peers: map[raft.ServerID]string{}}
	for id, addr := range peers {
		f.peers[id] = addr
	}
	return f
}

// SetPeer records (or, with an empty addr, forgets) a server's HTTP
// address.
func (f *HTTPForwarder) SetPeer(id raft.ServerID, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if addr == "" {
		delete(f.peers, id)
		return
	}
	f.peers[id] = addr
}

// Forward implements Forwarder.
func (f *HTTPForwarder) Forward(ctx context.Context, leader raft.ServerID, req []byte) ([]byte, error) {
	f.mu.RLock()
	addr, ok := f.peers[leader]
	f.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: no HTTP address for leader %q", ErrNoLeader, leader)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+ForwardPath, bytes.NewReader(req))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForward, err)
	}
	hr.Header.Set("Content-Type", "application/octet-stream")
	resp, err := f.client.Do(hr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("%w: leader %q at %s unreachable: %w", ErrNoLeader, leader, addr, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrForward, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxForward+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading answer: %w", ErrForward, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: leader answered %s: %s", ErrForward, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// LocalForwarder forwards between servers of one process (tests and
// single-process clusters) through the same encoding as HTTPForwarder.
type LocalForwarder struct {
	mu      sync.RWMutex
	servers map[raft.ServerID]*Server
	down    map[raft.ServerID]bool
}

// NewLocalForwarder returns an empty LocalForwarder.
func NewLocalForwarder() *LocalForwarder {
	return &LocalForwarder{servers: map[raft.ServerID]*Server{}, down: map[raft.ServerID]bool{}}
}

// Add makes s reachable.
func (f *LocalForwarder) Add(s *Server) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers[s.ID()] = s
	delete(f.down, s.ID())
}

// SetReachable cuts (false) or restores (true) forwarding to a server, to
// model a partition.
func (f *LocalForwarder) SetReachable(id raft.ServerID, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[id] = !ok
}

// Forward implements Forwarder.
func (f *LocalForwarder) Forward(ctx context.Context, leader raft.ServerID, req []byte) ([]byte, error) {
	f.mu.RLock()
	s, ok := f.servers[leader]
	down := f.down[leader]
	f.mu.RUnlock()
	if !ok || down {
		return nil, fmt.Errorf("%w: %q unreachable", ErrNoLeader, leader)
	}
	return s.serveForward(ctx, req)
}

// --- request and response encoding ---------------------------------------

// A request is a version byte and a list of encoded commands; a response
// is a version byte and, per command, its index, an error code (0: none)
// and the error's text.
const forwardVersion byte = 1

// wireErrors gives each sentinel its code on the wire: its position.
// Append only.
var wireErrors = []error{
	nil, ErrNotLeader, ErrNoLeader, ErrTimeout, ErrShutdown, ErrForward,
	ErrUnknownVersion, ErrUnknownCommand, ErrMalformed, ErrInvalid,
	ErrUnknownJob, ErrJobExists, ErrJobFinished, ErrUnknownNode,
	ErrStaleGeneration, ErrStaleTerm, ErrStaleIncarnation, ErrLeadershipLost,
	ErrClusterConfig, ErrLimit, ErrStaleSession,
}

// otherError is the code of an error that wraps no sentinel.
const otherError = 255

// remoteError is an error received from the leader: its text, wrapping
// the sentinel it wrapped there.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

func encodeRequest(cmds [][]byte) []byte {
	w := &writer{}
	w.byte(forwardVersion)
	w.uvarint(uint64(len(cmds)))
	for _, c := range cmds {
		w.uvarint(uint64(len(c)))
		w.b = append(w.b, c...)
	}
	return w.b
}

func decodeRequest(b []byte) ([][]byte, error) {
	r := &reader{b: b}
	if v := r.byte(); r.err == nil && v != forwardVersion {
		return nil, fmt.Errorf("%w: forward request version %d", ErrUnknownVersion, v)
	}
	n := r.length(maxList)
	cmds := make([][]byte, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		m := r.length(maxForward)
		if r.err == nil {
			cmds = append(cmds, r.b[:m:m])
			r.b = r.b[m:]
		}
	}
	return cmds, r.done()
}

func encodeResponse(res []Result) []byte {
	w := &writer{}
	w.byte(forwardVersion)
	w.uvarint(uint64(len(res)))
	for _, r := range res {
		w.uvarint(r.Index)
		code, msg := byte(0), ""
		if r.Err != nil {
			code, msg = otherError, r.Err.Error()
			for i, e := range wireErrors[1:] {
				if errors.Is(r.Err, e) {
					code = byte(i + 1)
					break
				}
			}
		}
		w.byte(code)
		w.str(truncate(msg, maxString))
	}
	return w.b
}

// truncate cuts s to at most n bytes of valid UTF-8.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}

func decodeResponse(b []byte, want int) ([]Result, error) {
	r := &reader{b: b}
	if v := r.byte(); r.err == nil && v != forwardVersion {
		return nil, fmt.Errorf("%w: forward response version %d", ErrUnknownVersion, v)
	}
	n := r.length(maxList)
	if r.err == nil && n != want {
		return nil, fmt.Errorf("%w: %d results for %d commands", ErrMalformed, n, want)
	}
	res := make([]Result, n)
	for i := 0; i < n && r.err == nil; i++ {
		res[i].Index = r.uvarint()
		code := r.byte()
		msg := r.str()
		switch {
		case code == 0:
		case int(code) < len(wireErrors):
			res[i].Err = &remoteError{msg: msg, sentinel: wireErrors[code]}
		default:
			res[i].Err = errors.New(msg)
		}
	}
	return res, r.done()
}
