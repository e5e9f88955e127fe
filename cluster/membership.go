package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// EventKind says what happened to a member.
type EventKind int

// The event kinds. A member that left gracefully and one declared dead
// both arrive as EventLeave.
const (
	EventJoin EventKind = iota + 1
	EventUpdate
	EventLeave
)

func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventUpdate:
		return "update"
	case EventLeave:
		return "leave"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Member is one alive member as gossip knows it.
type Member struct {
	// Name is the member's unique name.
	Name string
	// Addr is its gossip address, host:port.
	Addr string
	Meta Meta
}

// Event is one change of membership.
type Event struct {
	Kind   EventKind
	Member Member
}

// Config configures one member.
type Config struct {
	// Name must be unique in the cluster.
	Name string
	// BindAddr is the address to listen on (default 127.0.0.1); BindPort
	// 0 picks a free port.
	BindAddr string
	BindPort int
	// Meta is what this member advertises.
	Meta Meta
	// Fast selects sub-second failure detection (probe every 200 ms,
	// gossip every 50 ms): a crashed member is noticed in under a second
	// on a LAN or loopback. Otherwise memberlist's LAN defaults apply
	// (several seconds).
	Fast bool
	// Logger receives memberlist's log lines (default slog.Default()).
	Logger *slog.Logger
	// Keys encrypt and authenticate gossip (AES-GCM, see ParseKeys): the
	// first is the primary key, used to send; every key is accepted on
	// receipt, and a packet no key opens is refused. Without keys gossip
	// is plaintext (insecure mode).
	Keys [][]byte
	// Label is put on every packet and checked on receipt (default
	// Label).
	Label string
	// WAN selects the pool between the labs of a federation
	// (docs/federation.md): memberlist's WAN profile, tuned for a few
	// labs' servers: a probe every 500 ms (timeout 400 ms: a round trip
	// between sites is well under), gossip every 200 ms, a suspect
	// declared dead after three probe intervals, so a lost lab is noticed
	// within a few seconds.
	WAN bool
	// Crowded tunes the LAN profile for many members sharing a few cores
	// (the control-plane bench runs hundreds in one process): a probe is
	// answered within 3 s (not 500 ms) and sent every 5 s, so a member
	// starved of CPU for a moment is not suspected, which costs a
	// suspicion and a refutation, each spread to every member; gossip
	// every 500 ms (not 200 ms), each message retransmitted 2 x log(N+1)
	// times (not 4), and 16,384 received messages queued (not 1,024:
	// a full queue drops them, and a member whose join was dropped stays
	// unknown until a push-pull minutes later); packets go uncompressed
	// (memberlist's LZW allocates a 64 KiB table for every packet it
	// sends), and received into one buffer, each copied out at its size
	// (memberlist's own transport allocates 64 KiB for every packet it
	// receives). docs/benchmarks.md has the measurements.
	Crowded bool
}

// WANLabel is the label of a federation's gossip pool.
const WANLabel = "pollux-federation"

// Membership is one running gossip member.
type Membership struct {
	ml     *memberlist.Memberlist
	ring   *memberlist.Keyring // nil without encryption
	name   string
	log    *slog.Logger
	events chan Event

	// addr is this member's gossip address, read once at start.
	addr string

	mu   sync.Mutex
	meta []byte
	// view is every alive member with valid metadata (this one
	// included), copied inside memberlist's callbacks, which run under
	// its node lock: memberlist updates its nodes in place, so reading
	// them through Memberlist.Members would race with a metadata update.
	view    map[string]Member
	pending []Event
	wake    chan struct{}
	done    chan struct{}
	stopped sync.Once
	pumped  chan struct{}
}

// Start creates the member and starts gossiping. It joins nobody: call
// Join with any existing member's address.
func Start(cfg Config) (*Membership, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: empty member name", ErrConfig)
	}
	meta, err := cfg.Meta.Encode()
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1"
	}
	if cfg.Label == "" {
		cfg.Label = Label
	}
	var ring *memberlist.Keyring
	if len(cfg.Keys) > 0 {
		if ring, err = memberlist.NewKeyring(cfg.Keys, cfg.Keys[0]); err != nil {
			return nil, fmt.Errorf("%w: gossip keys: %w", ErrConfig, err)
		}
	}
	m := &Membership{
		name:   cfg.Name,
		ring:   ring,
		log:    cfg.Logger.With("member", cfg.Name),
		events: make(chan Event),
		meta:   meta,
		view:   map[string]Member{},
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		pumped: make(chan struct{}),
	}
	mc := memberlistConfig(cfg)
	mc.Name = cfg.Name
	mc.Label = cfg.Label
	mc.Keyring = ring
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	mc.Delegate = (*delegate)(m)
	mc.Events = (*eventDelegate)(m)
	mc.LogOutput = logWriter{m.log}
	var own *packetTransport
	if cfg.Crowded {
		if own, err = newPacketTransport(cfg.BindAddr, cfg.BindPort, m.log); err != nil {
			return nil, err
		}
		mc.Transport = own
	}
	go m.pump()
	ml, err := memberlist.Create(mc)
	if err != nil {
		m.stop()
		if own != nil {
			own.Shutdown()
		}
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	m.ml = ml
	m.addr = ml.LocalNode().Address()
	return m, nil
}

// memberlistConfig is memberlist's configuration of cfg's profile
// (timing and compression; Start adds the rest).
func memberlistConfig(cfg Config) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	switch {
	case cfg.WAN:
		mc = memberlist.DefaultWANConfig()
		mc.ProbeInterval = 500 * time.Millisecond
		mc.ProbeTimeout = 400 * time.Millisecond
		mc.GossipInterval = 200 * time.Millisecond
		mc.SuspicionMult = 3
		mc.SuspicionMaxTimeoutMult = 3
		mc.DeadNodeReclaimTime = 30 * time.Second
	case cfg.Fast:
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 100 * time.Millisecond
		mc.GossipInterval = 50 * time.Millisecond
		mc.SuspicionMult = 2
		mc.SuspicionMaxTimeoutMult = 2
		mc.DeadNodeReclaimTime = time.Second
	case cfg.Crowded:
		mc.ProbeInterval = 5 * time.Second
		mc.ProbeTimeout = 3 * time.Second
		mc.GossipInterval = 500 * time.Millisecond
		mc.RetransmitMult = 2
		mc.HandoffQueueDepth = 16384
		mc.EnableCompression = false
		mc.DeadNodeReclaimTime = 30 * time.Second
	default:
		mc.DeadNodeReclaimTime = 30 * time.Second
	}
	return mc
}

// Join contacts the given gossip addresses (host:port) and returns how
// many answered. It fails only if none did.
func (m *Membership) Join(addrs []string) (int, error) {
	n, err := m.ml.Join(addrs)
	if n == 0 {
		return 0, fmt.Errorf("%w: %v: %w", ErrJoin, addrs, err)
	}
	return n, nil
}

// SetKeys replaces the gossip keys without a restart: keys[0] becomes
// the primary key, every key in keys is accepted, and keys not in keys are
// dropped. A rotation (docs/security.md) calls it on every member three
// times: with [old, new], [new, old], [new]. It fails on a member started
// without keys (gossip cannot be switched from plaintext to encrypted
// while running).
func (m *Membership) SetKeys(keys [][]byte) error {
	if m.ring == nil {
		return fmt.Errorf("%w: gossip was started without keys", ErrConfig)
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no gossip key", ErrConfig)
	}
	for _, k := range keys {
		if err := m.ring.AddKey(k); err != nil {
			return fmt.Errorf("%w: gossip key: %w", ErrConfig, err)
		}
	}
	if err := m.ring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("%w: gossip key: %w", ErrConfig, err)
	}
	for _, k := range m.ring.GetKeys() {
		if !slices.ContainsFunc(keys, func(n []byte) bool { return bytes.Equal(n, k) }) {
			if err := m.ring.RemoveKey(k); err != nil {
				return fmt.Errorf("%w: gossip key: %w", ErrConfig, err)
			}
		}
	}
	m.log.Info("cluster: gossip keys installed", "primary", KeyID(keys[0]), "keys", len(keys))
	return nil
}

// KeepJoined re-joins, every interval until ctx ends, each of seeds
// (gossip addresses) that is not an alive member. Gossip alone never
// heals a partition: once each side has declared the other dead, neither
// probes nor syncs with it again, even after the network is back. A
// re-join makes the two sides exchange state, the member declared dead
// refutes it, and the views merge.
func (m *Membership) KeepJoined(ctx context.Context, seeds []string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.done:
			return
		case <-t.C:
		}
		alive := map[string]bool{m.Addr(): true}
		for _, mem := range m.Members() {
			alive[mem.Addr] = true
		}
		var missing []string
		for _, s := range seeds {
			if !alive[s] {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if n, err := m.ml.Join(missing); n > 0 {
			m.log.Info("cluster: re-joined members missing from the view", "seeds", missing, "answered", n)
		} else {
			m.log.Debug("cluster: re-join failed", "seeds", missing, "err", err)
		}
	}
}

// Events delivers membership changes of other members, in order. The
// channel is closed after Shutdown. Events queue without bound until read:
// the gossip machinery never waits for the reader.
func (m *Membership) Events() <-chan Event { return m.events }

// Local is this member.
func (m *Membership) Local() Member {
	meta, _ := DecodeMeta(m.currentMeta())
	return Member{Name: m.name, Addr: m.addr, Meta: meta}
}

// Addr is this member's gossip address, host:port, to give to Join.
func (m *Membership) Addr() string { return m.addr }

// Members returns the alive members with valid metadata, this one
// included, sorted by name.
func (m *Membership) Members() []Member {
	local := m.Local()
	m.mu.Lock()
	out := make([]Member, 0, len(m.view)+1)
	for _, mem := range m.view {
		if mem.Name != local.Name {
			out = append(out, mem)
		}
	}
	m.mu.Unlock()
	out = append(out, local)
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// UpdateMeta changes what this member advertises and gossips it.
func (m *Membership) UpdateMeta(meta Meta, timeout time.Duration) error {
	b, err := meta.Encode()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.meta = b
	m.mu.Unlock()
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("cluster: gossiping metadata: %w", err)
	}
	return nil
}

// Leave announces a graceful departure and waits up to timeout for it to
// spread. Call Shutdown afterwards.
func (m *Membership) Leave(timeout time.Duration) error {
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("cluster: leaving: %w", err)
	}
	return nil
}

// Shutdown stops gossiping without a goodbye (others will declare this
// member dead) and closes Events. It is safe to call more than once.
func (m *Membership) Shutdown() error {
	err := m.ml.Shutdown()
	m.stop()
	if err != nil {
		return fmt.Errorf("cluster: shutting down: %w", err)
	}
	return nil
}

func (m *Membership) stop() {
	m.stopped.Do(func() { close(m.done) })
	<-m.pumped
}

func (m *Membership) currentMeta() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.meta
}

func (m *Membership) member(n *memberlist.Node) (Member, bool) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		m.log.Warn("cluster: ignoring member with bad metadata", "peer", n.Name, "addr", n.Address(), "err", err)
		return Member{}, false
	}
	return Member{Name: n.Name, Addr: n.Address(), Meta: meta}, true
}

// enqueue is called from memberlist's callbacks, under its node lock: it
// copies the node into the view and, for another member, queues the
// event; it never blocks.
func (m *Membership) enqueue(kind EventKind, n *memberlist.Node) {
	mem, ok := m.member(n)
	m.mu.Lock()
	if ok && kind != EventLeave {
		m.view[n.Name] = mem
	} else {
		delete(m.view, n.Name)
	}
	if !ok || n.Name == m.name {
		m.mu.Unlock()
		return
	}
	m.pending = append(m.pending, Event{Kind: kind, Member: mem})
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// pump hands queued events to the reader of Events.
func (m *Membership) pump() {
	defer close(m.pumped)
	defer close(m.events)
	for {
		m.mu.Lock()
		batch := m.pending
		m.pending = nil
		m.mu.Unlock()
		for _, ev := range batch {
			select {
			case m.events <- ev:
			case <-m.done:
				return
			}
		}
		select {
		case <-m.wake:
		case <-m.done:
			return
		}
	}
}

// delegate serves this member's metadata; it carries no user messages.
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	b := (*Membership)(d).currentMeta()
	if len(b) > limit {
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg([]byte)                {}
func (d *delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *delegate) LocalState(bool) []byte          { return nil }
func (d *delegate) MergeRemoteState([]byte, bool)   {}

type eventDelegate Membership

func (e *eventDelegate) NotifyJoin(n *memberlist.Node) { (*Membership)(e).enqueue(EventJoin, n) }
func (e *eventDelegate) NotifyLeave(n *memberlist.Node) {
	(*Membership)(e).enqueue(EventLeave, n)
}
func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) {
	(*Membership)(e).enqueue(EventUpdate, n)
}

// logWriter turns memberlist's "[LEVEL] memberlist: text" lines into slog
// records.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range []struct {
		prefix string
		level  slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}} {
		if i := bytes.Index(line, []byte(l.prefix)); i >= 0 {
			level = l.level
			line = bytes.TrimSpace(line[i+len(l.prefix):])
			break
		}
	}
	w.log.Log(context.Background(), level, string(line))
	return len(p), nil
}
