package consensus

import (
	"context"
	"errors"
	"fmt"
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

// maxForward bounds a forwarded request or its answer.
const maxForward = 64 << 20

// LocalForwarder forwards between servers of one process (tests and
// single-process clusters) through the same encoding as the Raft port's
// forwarding (Transport.Forwarder).
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
	ErrNoSpace, ErrClusterConfig, ErrLimit, ErrStaleSession,
	ErrACLBootstrapped, ErrUnknownToken, ErrTokenRevoked, ErrPermission, ErrTokenExists,
	ErrNoFederation, ErrLeaseRefused,
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
