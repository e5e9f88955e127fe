package consensus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"pollux/consensus/state"
	"strings"
	"sync"
	"unicode/utf8"

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

// Bounds of the forwarding protocol: the bytes of a request or its
// answer, the commands of one request, the bytes of an error's text.
const (
	maxForward     = 64 << 20
	maxForwardList = 1 << 16
	maxErrorText   = 4096
)

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
	state.ErrUnknownVersion, state.ErrUnknownCommand, state.ErrMalformed, state.ErrInvalid,
	state.ErrUnknownJob, state.ErrJobExists, state.ErrJobFinished, state.ErrUnknownNode,
	state.ErrStaleGeneration, state.ErrStaleTerm, state.ErrStaleIncarnation, ErrLeadershipLost,
	ErrNoSpace, state.ErrClusterConfig, state.ErrLimit, state.ErrStaleSession,
	state.ErrACLBootstrapped, state.ErrUnknownToken, state.ErrTokenRevoked, state.ErrPermission, state.ErrTokenExists,
	state.ErrNoFederation, state.ErrLeaseRefused,
	state.ErrCheckpointHeld, state.ErrQuota, state.ErrStateFull, ErrRateLimited,
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
	b := []byte{forwardVersion}
	b = binary.AppendUvarint(b, uint64(len(cmds)))
	for _, c := range cmds {
		b = appendBytes(b, c)
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// fields reads a forward request or response: its version byte first,
// then minimal uvarints, single bytes and length-prefixed byte strings;
// the first error sticks and later reads return zero values.
type fields struct {
	b   []byte
	err error
}

func (f *fields) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("%w: "+format, append([]any{state.ErrMalformed}, args...)...)
	}
}

func (f *fields) version(what string) {
	switch {
	case len(f.b) == 0:
		f.fail("empty forward %s", what)
	case f.b[0] != forwardVersion:
		f.err = fmt.Errorf("%w: forward %s version %d", state.ErrUnknownVersion, what, f.b[0])
	default:
		f.b = f.b[1:]
	}
}

func (f *fields) byte() byte {
	if f.err == nil && len(f.b) == 0 {
		f.fail("truncated")
	}
	if f.err != nil {
		return 0
	}
	v := f.b[0]
	f.b = f.b[1:]
	return v
}

func (f *fields) uvarint() uint64 {
	if f.err != nil {
		return 0
	}
	v, n := binary.Uvarint(f.b)
	if n <= 0 || (n > 1 && f.b[n-1] == 0) {
		f.fail("bad or non-minimal uvarint")
		return 0
	}
	f.b = f.b[n:]
	return v
}

// length reads a length and checks it against limit and what is left.
func (f *fields) length(limit int) int {
	n := f.uvarint()
	if f.err == nil && (n > uint64(limit) || n > uint64(len(f.b))) {
		f.fail("length %d over limit %d or input", n, limit)
	}
	if f.err != nil {
		return 0
	}
	return int(n)
}

func (f *fields) bytes(limit int) []byte {
	n := f.length(limit)
	v := f.b[:n:n]
	f.b = f.b[n:]
	return v
}

func (f *fields) done() error {
	if f.err == nil && len(f.b) != 0 {
		f.fail("%d trailing bytes", len(f.b))
	}
	return f.err
}

func decodeRequest(b []byte) ([][]byte, error) {
	f := &fields{b: b}
	f.version("request")
	n := f.length(maxForwardList)
	cmds := make([][]byte, 0, n)
	for i := 0; i < n && f.err == nil; i++ {
		if c := f.bytes(maxForward); f.err == nil {
			cmds = append(cmds, c)
		}
	}
	return cmds, f.done()
}

func encodeResponse(res []Result) []byte {
	b := []byte{forwardVersion}
	b = binary.AppendUvarint(b, uint64(len(res)))
	for _, r := range res {
		b = binary.AppendUvarint(b, r.Index)
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
		b = append(b, code)
		b = appendBytes(b, []byte(truncate(msg, maxErrorText)))
	}
	return b
}

// truncate cuts s to at most n bytes of valid UTF-8.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}

func decodeResponse(b []byte, want int) ([]Result, error) {
	f := &fields{b: b}
	f.version("response")
	n := f.length(maxForwardList)
	if f.err == nil && n != want {
		return nil, fmt.Errorf("%w: %d results for %d commands", state.ErrMalformed, n, want)
	}
	res := make([]Result, n)
	for i := 0; i < n && f.err == nil; i++ {
		res[i].Index = f.uvarint()
		code := f.byte()
		msg := f.bytes(maxErrorText)
		if f.err == nil && !utf8.Valid(msg) {
			f.fail("error text is not UTF-8")
		}
		switch {
		case code == 0:
		case int(code) < len(wireErrors):
			res[i].Err = &remoteError{msg: string(msg), sentinel: wireErrors[code]}
		default:
			res[i].Err = errors.New(string(msg))
		}
	}
	return res, f.done()
}
