package pki

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Pre-authentication defaults of every TLS listener (Gate).
const (
	// DefaultHandshakeTimeout bounds one TLS handshake: on a LAN, or
	// between labs, a handshake takes milliseconds; a peer that has not
	// finished in this time is either broken or holding a slot.
	DefaultHandshakeTimeout = 3 * time.Second
	// DefaultMaxHandshakes bounds the handshakes in progress at once
	// from addresses that are not the cluster's members.
	DefaultMaxHandshakes = 256
	// DefaultPerSource bounds the handshakes in progress at once from
	// one source that is not a member (an IPv4 address, an IPv6 /64).
	DefaultPerSource = 8
	// DefaultMemberHandshakes is the room kept for the members: their
	// handshakes in progress at once, counted apart from everyone
	// else's, so that a flood from elsewhere never takes it.
	DefaultMemberHandshakes = 64
)

// Reasons a Gate closes a connection before (or instead of) its
// handshake; they label the refusal counters.
const (
	// ReasonPerSource: the source has its share of handshakes in
	// progress.
	ReasonPerSource = "per_source"
	// ReasonTotal: every handshake slot for non-members is taken.
	ReasonTotal = "total"
	// ReasonMembers: the members' own room is full.
	ReasonMembers = "members"
	// ReasonConnsPerSource: the source holds its share of accepted
	// connections (GateOptions.ConnsPerSource).
	ReasonConnsPerSource = "conns_per_source"
	// ReasonHandshake: the handshake failed or ran out of time.
	ReasonHandshake = "handshake"
)

// Reasons lists every refusal reason, in a fixed order.
var Reasons = []string{ReasonPerSource, ReasonTotal, ReasonMembers, ReasonConnsPerSource, ReasonHandshake}

// GateOptions configure a Gate. Zero fields take the defaults above.
type GateOptions struct {
	// Channel names the gate in log lines and metrics.
	Channel Channel
	// Logger gets the refusals (default slog.Default()): one line per
	// source and second at most, with the count since the last.
	Logger           *slog.Logger
	HandshakeTimeout time.Duration
	MaxHandshakes    int
	PerSource        int
	MemberHandshakes int
	// ConnsPerSource, if positive, bounds the connections that one
	// source that is not a member holds open after its handshake: for
	// the ports anybody may finish a handshake on (the API, the report
	// port), where a handshake proves nothing.
	ConnsPerSource int
	// Member tells the cluster's own members' addresses (nil: none is).
	Member func(netip.Addr) bool
}

// Gate is the admission control of one TLS listener before any
// authentication: a deadline on each handshake, a cap on the handshakes
// in progress per source address and in total, and room of its own for
// the cluster's members, so that an anonymous flood from a few addresses
// cannot keep the members (or anybody else) out. A connection past a cap
// is closed at once, counted and logged. Safe for concurrent use.
type Gate struct {
	o GateOptions

	mu         sync.Mutex
	handshakes map[netip.Prefix]int // non-members' handshakes in progress, per source
	conns      map[netip.Prefix]int // non-members' accepted connections, per source
	others     int                  // non-members' handshakes in progress
	members    int                  // members' handshakes in progress
	logged     map[netip.Prefix]logState

	refused [5]atomic.Uint64 // by Reasons index
}

type logState struct {
	at     time.Time
	missed int
}

// NewGate returns a gate with o's limits.
func NewGate(o GateOptions) *Gate {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxHandshakes, DefaultMaxHandshakes)
	def(&o.PerSource, DefaultPerSource)
	def(&o.MemberHandshakes, DefaultMemberHandshakes)
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.Member == nil {
		o.Member = func(netip.Addr) bool { return false }
	}
	return &Gate{o: o, handshakes: map[netip.Prefix]int{}, conns: map[netip.Prefix]int{}, logged: map[netip.Prefix]logState{}}
}

// Channel is the channel the gate guards.
func (g *Gate) Channel() Channel { return g.o.Channel }

// HandshakeTimeout is the deadline of one handshake.
func (g *Gate) HandshakeTimeout() time.Duration { return g.o.HandshakeTimeout }

// Source is the address a Gate counts a peer under: an IPv4 address (an
// IPv4-mapped IPv6 address as IPv4), or the /64 of an IPv6 address (one
// host usually holds a whole /64). ok is false for an address that is
// not IP (a Unix socket, a pipe in tests): such peers share one source.
func Source(a net.Addr) (p netip.Prefix, ip netip.Addr, ok bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{}, netip.Addr{}, false
	}
	ip = ap.Addr().Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32), ip, true
	}
	p, _ = ip.WithZone("").Prefix(64)
	return p, ip, true
}

// Ticket is an admitted connection: Done ends its handshake (whatever
// its outcome) and Closed its hold on the source's connections (once it
// is closed). Both may be called more than once.
type Ticket struct {
	g        *Gate
	src      netip.Prefix
	member   bool
	held     bool // counted in the source's connections
	hs, conn sync.Once
}

// Done gives the handshake's slot back.
func (t *Ticket) Done() {
	t.hs.Do(func() {
		g := t.g
		g.mu.Lock()
		defer g.mu.Unlock()
		if t.member {
			g.members--
			return
		}
		g.others--
		if g.handshakes[t.src]--; g.handshakes[t.src] <= 0 {
			delete(g.handshakes, t.src)
		}
	})
}

// Closed gives the connection's place among its source's back (and
// the handshake's slot, if Done was not called).
func (t *Ticket) Closed() {
	t.Done()
	t.conn.Do(func() {
		if !t.held {
			return
		}
		g := t.g
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.conns[t.src]--; g.conns[t.src] <= 0 {
			delete(g.conns, t.src)
		}
	})
}

// Member reports whether the ticket's peer is one of the members.
func (t *Ticket) Member() bool { return t.member }

// Admit lets a connection from remote begin its handshake, or refuses
// it: the caller then closes the connection at once. The refusal is
// counted and logged (rate-limited per source) by Admit. An admitted
// connection's ticket must be ended with Done and Closed; Conn does both
// for a connection it wraps.
func (g *Gate) Admit(remote net.Addr) (*Ticket, error) {
	src, ip, _ := Source(remote)
	member := ip.IsValid() && g.o.Member(ip)
	held := !member && g.o.ConnsPerSource > 0
	g.mu.Lock()
	reason := ""
	switch {
	case member && g.members >= g.o.MemberHandshakes:
		reason = ReasonMembers
	case member:
		g.members++
	case g.handshakes[src] >= g.o.PerSource:
		reason = ReasonPerSource
	case g.others >= g.o.MaxHandshakes:
		reason = ReasonTotal
	case held && g.conns[src] >= g.o.ConnsPerSource:
		reason = ReasonConnsPerSource
	default:
		g.others++
		g.handshakes[src]++
		if held {
			g.conns[src]++
		}
	}
	g.mu.Unlock()
	if reason != "" {
		err := g.refusal(reason, src)
		g.Refuse(remote, reason, err)
		return nil, err
	}
	return &Ticket{g: g, src: src, member: member, held: held}, nil
}

// Conn wraps c, admitted with t, so that closing it ends the ticket.
func (t *Ticket) Conn(c net.Conn) net.Conn { return &gatedConn{Conn: c, t: t} }

// gatedConn ends its ticket when it is closed.
type gatedConn struct {
	net.Conn
	t *Ticket
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.t.Closed()
	return err
}

// refusal is the error of a refusal for reason.
func (g *Gate) refusal(reason string, src netip.Prefix) error {
	switch reason {
	case ReasonMembers:
		return fmt.Errorf("%w: %d TLS handshakes of members in progress (the members' room is full)", ErrOverload, g.o.MemberHandshakes)
	case ReasonPerSource:
		return fmt.Errorf("%w: %d TLS handshakes from %s in progress already (at most %d per source)", ErrOverload, g.o.PerSource, src, g.o.PerSource)
	case ReasonTotal:
		return fmt.Errorf("%w: too many TLS handshakes in progress (%d, not counting members')", ErrOverload, g.o.MaxHandshakes)
	default:
		return fmt.Errorf("%w: %s holds %d connections already (at most %d per source before authentication)", ErrOverload, src,
			g.o.ConnsPerSource, g.o.ConnsPerSource)
	}
}

// Refuse counts a refusal of remote for reason and logs it: every
// refusal but ReasonHandshake at most once a second per source, with
// the number of refusals the line stands for.
func (g *Gate) Refuse(remote net.Addr, reason string, err error) {
	if i := slices.Index(Reasons, reason); i >= 0 {
		g.refused[i].Add(1)
	}
	peer := "unknown"
	if remote != nil {
		peer = remote.String()
	}
	if reason == ReasonHandshake {
		g.o.Logger.Warn("pki: refused connection", "channel", g.o.Channel, "peer", peer, "err", err.Error())
		return
	}
	src, _, _ := Source(remote)
	now := time.Now()
	g.mu.Lock()
	st := g.logged[src]
	if now.Sub(st.at) < time.Second {
		st.missed++
		g.logged[src] = st
		g.mu.Unlock()
		return
	}
	n := st.missed + 1
	g.logged[src] = logState{at: now}
	if len(g.logged) > 4096 { // forget quiet sources
		maps.DeleteFunc(g.logged, func(_ netip.Prefix, s logState) bool { return now.Sub(s.at) > time.Second })
	}
	g.mu.Unlock()
	g.o.Logger.Warn("pki: refused connection", "channel", g.o.Channel, "peer", peer, "reason", reason, "err", err.Error(),
		"refused_since_last_line", n)
}

// GateStats is a snapshot of a gate's counters.
type GateStats struct {
	Channel Channel
	// Handshakes in progress now: of members and of everybody else.
	MemberHandshakes, OtherHandshakes int
	// Refused counts the connections closed, by reason (Reasons).
	Refused map[string]uint64
}

// Stats is a snapshot of the gate's counters.
func (g *Gate) Stats() GateStats {
	g.mu.Lock()
	s := GateStats{Channel: g.o.Channel, MemberHandshakes: g.members, OtherHandshakes: g.others, Refused: map[string]uint64{}}
	g.mu.Unlock()
	for i, r := range Reasons {
		s.Refused[r] = g.refused[i].Load()
	}
	return s
}

// AddrSet is a set of IP addresses that changes while it is read: the
// cluster's members as Raft's configuration and gossip know them
// (GateOptions.Member is its Contains). Safe for concurrent use.
type AddrSet struct {
	p atomic.Pointer[map[netip.Addr]struct{}]
}

// Set replaces the set's addresses.
func (s *AddrSet) Set(addrs []netip.Addr) {
	m := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			m[a.Unmap()] = struct{}{}
		}
	}
	s.p.Store(&m)
}

// Contains reports whether a is in the set.
func (s *AddrSet) Contains(a netip.Addr) bool {
	m := s.p.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[a.Unmap()]
	return ok
}

// Len is the number of addresses in the set.
func (s *AddrSet) Len() int {
	m := s.p.Load()
	if m == nil {
		return 0
	}
	return len(*m)
}
