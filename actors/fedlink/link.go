package fedlink

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"pollux/actors/pb"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/consensus/state"
)

// DefaultInterval is how often a leader exchanges bids with its peers
// and plans leases: a peer is noticed lost after two to three of them.
const DefaultInterval = 2 * time.Second

// Store is the part of consensus.Server the link uses.
type Store interface {
	Leadership() (term uint64, leader bool)
	LocalState() *state.State
	ApplyCommand(ctx context.Context, c state.Command) error
}

// LocalBid is the lab's bid as its allocator computed it after a round:
// the value of each GPU to its jobs (federation.Curve) and the GPUs its
// jobs use on each of its nodes.
type LocalBid struct {
	Curve []float64
	Used  map[string]int
	// Reclaimable are the lent nodes the allocator's what-if round
	// would use now (federation.Bid.Reclaimable): only their leases are
	// reclaimed. Nil: every lent node.
	Reclaimable map[string]bool
}

// Config configures a link.
type Config struct {
	// Name is the lab's cluster name; Creds its server's credentials
	// (a server certificate naming the cluster).
	Name  string
	Creds *pki.Credentials
	// Federation is the loaded federation file.
	Federation *Federation
	Store      Store
	// Interval between bid exchanges (default DefaultInterval).
	Interval time.Duration
	// Now is the clock (default time.Now): lease times are its seconds.
	Now func() time.Time
	// LeaderAddr, if set, is the federation address of this lab's
	// leader ("" when unknown): a bid reaching a follower is redirected
	// there.
	LeaderAddr func() string
	// Gossip, if set, lists the alive members of the federation's gossip
	// pool (cluster.Membership.Members of a WAN pool), named
	// <cluster>/<server> with their federation addresses: a peer's
	// servers found there are reached too, and a peer seen there whose
	// servers are all gone from it (and whose last bid is over an
	// interval old) is lost without waiting for two intervals.
	Gossip func() []cluster.Member
	// RelayOwner, if set, is the actor on this server that the lab's
	// node actors send the reports and exits of borrowers' workers to
	// (it hands them to Relay).
	RelayOwner func() *pb.Ref
	// OnAck, if set, is given a lender node's ack of this lab's runs
	// there (its node named federation.BorrowedID), for the allocator.
	OnAck func(*pb.AssignAck)
	// OnOrder, if set, is called when a borrower's order changes the
	// runs it wants on one of the lab's nodes, so that the allocator
	// assigns them soon rather than at its next round.
	OnOrder func()
	// Deliver, if set, delivers a lender's relayed worker reports or
	// exit to the job actor that owns them.
	Deliver func(owner *pb.Ref, msg proto.Message)
	Logger  *slog.Logger
}

// Link is one server's side of the federation. Its handler serves the
// federation listener on every server; its rounds (Run) act only while
// the server leads.
type Link struct {
	cfg     Config
	clients map[string]*peerClient

	mu sync.Mutex
	// local is the allocator's latest bid and localTerm the Raft term in
	// which it was handed over: a round uses only a bid of the current
	// leadership.
	local     *LocalBid
	localTerm uint64
	bids      map[string]received
	status    map[string]*peerState
	// As a lender: each borrower's newest order per node and the fence
	// of its newest order. As a borrower: the jobs (and their owners)
	// of the newest order sent for each borrowed node.
	orders map[orderKey]*ordered
	fences map[string]fence
	sent   map[string]map[string]*pb.Ref
}

type received struct {
	msg *BidMessage
	at  time.Time
}

type peerState struct {
	up      bool
	lastBid time.Time
	since   time.Time
	// gossiped: a server of the peer is alive in the gossip pool.
	gossiped bool
}

type peerClient struct {
	http  *http.Client
	addrs []string
	mu    sync.Mutex
	next  int // the address that answered last
}

// New checks cfg and makes a link.
func New(cfg Config) (*Link, error) {
	if cfg.Store == nil || cfg.Federation == nil || cfg.Creds == nil {
		return nil, fmt.Errorf("%w: a link needs a store, a federation and credentials", ErrConfig)
	}
	if cfg.Creds.Identity.Cluster != cfg.Name || !federation.ValidName(cfg.Name) {
		return nil, fmt.Errorf("%w: cluster %q with the certificate of %s", ErrConfig, cfg.Name, cfg.Creds.Identity)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LeaderAddr == nil {
		cfg.LeaderAddr = func() string { return "" }
	}
	l := &Link{cfg: cfg, clients: map[string]*peerClient{}, bids: map[string]received{}, status: map[string]*peerState{},
		orders: map[orderKey]*ordered{}, fences: map[string]fence{}, sent: map[string]map[string]*pb.Ref{}}
	for _, p := range cfg.Federation.Peers {
		tc, err := cfg.Creds.FederationClientConfig(p.Name, p.Pool)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		tr := &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute,
			TLSHandshakeTimeout: pki.DefaultHandshakeTimeout, ResponseHeaderTimeout: 10 * time.Second}
		l.clients[p.Name] = &peerClient{http: &http.Client{Transport: tr, Timeout: 10 * time.Second}, addrs: p.Addresses}
		l.status[p.Name] = &peerState{}
	}
	return l, nil
}

// Close drops the link's idle connections.
func (l *Link) Close() {
	for _, c := range l.clients {
		c.http.CloseIdleConnections()
	}
}

// SetBid hands the link the lab's latest bid (the allocator, after each
// round it leads).
func (l *Link) SetBid(b LocalBid) {
	b.Curve = slices.Clone(b.Curve)
	b.Used = maps.Clone(b.Used)
	b.Reclaimable = maps.Clone(b.Reclaimable)
	term, _ := l.cfg.Store.Leadership()
	l.mu.Lock()
	l.local, l.localTerm = &b, term
	l.mu.Unlock()
}

// PeerStatus is what the link knows of a peer.
type PeerStatus struct {
	Name string `json:"name"`
	// Up is set while bids arrive from the peer (one within two
	// intervals); Since is when it last changed, LastBid when its last
	// bid arrived (zero: never).
	Up      bool      `json:"up"`
	Since   time.Time `json:"since"`
	LastBid time.Time `json:"last_bid"`
}

// Peers are the peers' status, by name.
func (l *Link) Peers() []PeerStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []PeerStatus
	for _, name := range slices.Sorted(maps.Keys(l.status)) {
		s := l.status[name]
		out = append(out, PeerStatus{Name: name, Up: s.up, Since: s.since, LastBid: s.lastBid})
	}
	return out
}

// Host is the host of the agent of a node the lab borrows
// (federation.BorrowedID), as its lender's last bid gave it ("" not
// known): a job whose first node it is has its rendezvous there
// (control.AssignOptions.BorrowedHost). The last bid is used however
// old, so that a lender lost does not change the workers' rendezvous.
func (l *Link) Host(id string) string {
	lender, node, ok := federation.SplitBorrowed(id)
	if !ok {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.bids[lender]; ok {
		return r.msg.Hosts[node]
	}
	return ""
}

// Run runs a round every interval while the server leads, until ctx
// ends.
// Between rounds it checks the peers four times an interval, so that a
// peer is noticed lost soon after its last bid is two intervals old.
func (l *Link) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	c := time.NewTicker(l.cfg.Interval / 4)
	defer c.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, leader := l.cfg.Store.Leadership(); leader {
				l.Round(ctx)
			}
		case <-c.C:
			if _, leader := l.cfg.Store.Leadership(); leader {
				l.check(l.cfg.Now())
			}
		}
	}
}

// seconds is a time as lease commands carry it.
func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Round is one federation round of the leader: expire the leases whose
// time to live ran out, send the lab's bid to every peer, note the peers
// lost (no bid for two intervals), plan on the bids at hand and carry
// out this lab's part of the plan. Until the allocator has handed over a
// bid in the current leadership, it only expires leases: a lab that bid
// nothing would look idle (and lend everything) and its peers would
// reclaim what it borrows. It returns the commands it carried out and
// those that failed.
func (l *Link) Round(ctx context.Context) (done, failed []federation.Command) {
	now := l.cfg.Now()
	at := seconds(now)
	st := l.cfg.Store.LocalState()
	lab, ok := st.FedLab()
	if !ok {
		return nil, nil
	}
	for _, le := range st.Fed.Ledger.Leases() {
		if le.Expires <= at {
			if err := l.apply(ctx, federation.Command{Op: federation.OpExpire, From: l.cfg.Name, At: at}); err != nil {
				l.cfg.Logger.Warn("federation: expiring leases", "err", err)
			}
			st = l.cfg.Store.LocalState()
			break
		}
	}
	lg := st.Fed.Ledger
	term, _ := l.cfg.Store.Leadership()
	l.mu.Lock()
	local, localTerm := l.local, l.localTerm
	l.mu.Unlock()
	if local == nil || localTerm != term {
		return nil, nil
	}
	msg := &BidMessage{From: l.cfg.Name, At: at, Lab: lab, LastReclaim: lg.LastReclaim(), Leases: lg.Leases(), Curve: local.Curve, Used: map[string]int{},
		Hosts: map[string]string{}}
	for id, g := range local.Used {
		if n, ok := lab.Node(id); ok {
			msg.Used[id] = min(g, n.GPUs)
		}
	}
	for _, n := range lab.Nodes {
		if h := st.Nodes[n.ID].Host(); validHost(h) {
			msg.Hosts[n.ID] = h
		}
	}
	body, err := json.Marshal(msg)
	if err != nil {
		l.cfg.Logger.Error("federation: encoding the bid", "err", err)
		return nil, nil
	}
	var wg sync.WaitGroup
	for name := range l.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A bid is worth nothing after the interval: a peer that
			// does not answer within it does not hold the round up.
			c, cancel := context.WithTimeout(ctx, l.cfg.Interval)
			defer cancel()
			if err := l.post(c, name, PathBid, body); err != nil {
				l.cfg.Logger.Debug("federation: sending the bid", "peer", name, "err", err)
			}
		}()
	}
	wg.Wait()
	l.check(now)

	round := federation.Round{At: at, Settings: l.cfg.Federation.Settings, Decider: l.cfg.Name,
		Bids: []federation.Bid{{Lab: &msg.Lab, Curve: msg.Curve, Used: msg.Used, LastReclaim: msg.LastReclaim, Reclaimable: local.Reclaimable}}}
	bidders := map[string]bool{l.cfg.Name: true}
	leases := map[string]federation.Lease{}
	for _, le := range msg.Leases {
		leases[le.ID] = le
	}
	l.mu.Lock()
	for _, name := range slices.Sorted(maps.Keys(l.bids)) {
		r := l.bids[name]
		if now.Sub(r.at) > 2*l.cfg.Interval {
			continue
		}
		bidders[name] = true
		round.Bids = append(round.Bids, federation.Bid{Lab: &r.msg.Lab, Curve: r.msg.Curve, Used: r.msg.Used, LastReclaim: r.msg.LastReclaim})
		for _, le := range r.msg.Leases {
			// The lab's own ledger is the authority on its own leases: a
			// lease only the peer holds (half committed) runs out there.
			if _, ok := leases[le.ID]; !ok && le.Lender != l.cfg.Name && le.Borrower != l.cfg.Name {
				leases[le.ID] = le
			}
		}
	}
	// A lease this lab borrows that its lender's bid, made after the
	// grant, does not list was never committed by the lender (or ended
	// there): it has no effect, and is released here at once rather than
	// left to run out.
	var halves []string
	for _, le := range msg.Leases {
		if r, ok := l.bids[le.Lender]; ok && le.Borrower == l.cfg.Name && now.Sub(r.at) <= 2*l.cfg.Interval && r.msg.At > le.Granted &&
			!slices.ContainsFunc(r.msg.Leases, func(o federation.Lease) bool { return o.ID == le.ID }) {
			halves = append(halves, le.ID)
		}
	}
	l.mu.Unlock()
	for _, id := range halves {
		delete(leases, id)
		c := federation.Command{Op: federation.OpRelease, From: l.cfg.Name, Lease: id, At: at}
		if err := l.apply(ctx, c); err != nil {
			l.cfg.Logger.Warn("federation: releasing a lease its lender does not hold", "lease", id, "err", err)
			continue
		}
		l.cfg.Logger.Info("federation: released a lease its lender does not hold", "lease", id)
		done = append(done, c)
	}
	for _, id := range slices.Sorted(maps.Keys(leases)) {
		if le := leases[id]; bidders[le.Lender] && bidders[le.Borrower] {
			round.Leases = append(round.Leases, le)
		}
	}
	cmds, err := federation.Plan(round)
	if err != nil {
		l.cfg.Logger.Warn("federation: planning", "err", err)
		return nil, nil
	}
	for _, c := range cmds {
		if err := l.Commit(ctx, c); err != nil {
			l.cfg.Logger.Warn("federation: lease command not carried out", "op", c.Op, "lease", c.Lease, "err", err)
			failed = append(failed, c)
			continue
		}
		switch c.Op {
		case federation.OpRenew:
		case federation.OpReclaim:
			why := "need" // the lab's own jobs need the GPUs
			if c.Reason == federation.ReasonRebalance {
				why = string(c.Reason)
			}
			l.cfg.Logger.Info("federation: lease", "op", c.Op, "lease", c.Lease, "reason", why)
		default:
			l.cfg.Logger.Info("federation: lease", "op", c.Op, "lease", c.Lease, "lender", c.Lender, "borrower", c.Borrower, "nodes", c.Nodes)
		}
		done = append(done, c)
	}
	return done, failed
}

// check marks lost the peers whose last bid is older than two
// intervals, or that are gone from the gossip pool, logging each change
// once.
func (l *Link) check(now time.Time) {
	var alive map[string]bool
	if l.cfg.Gossip != nil {
		alive = map[string]bool{}
		for _, m := range l.cfg.Gossip() {
			if c, _, ok := strings.Cut(m.Name, "/"); ok {
				alive[c] = true
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, s := range l.status {
		gone := false
		if alive != nil {
			gone = s.gossiped && !alive[name]
			s.gossiped = alive[name]
		}
		switch {
		case !s.up:
		case now.Sub(s.lastBid) > 2*l.cfg.Interval:
			s.up, s.since = false, now
			l.cfg.Logger.Warn("federation: peer lost: no bid for two intervals; its leases will run out", "peer", name,
				"last_bid", s.lastBid.UTC().Format(time.RFC3339Nano))
		case gone && now.Sub(s.lastBid) > l.cfg.Interval:
			s.up, s.since = false, now
			l.cfg.Logger.Warn("federation: peer lost: its servers left the federation's gossip; its leases will run out", "peer", name,
				"last_bid", s.lastBid.UTC().Format(time.RFC3339Nano))
		}
	}
}

// seen records a bid from peer.
func (l *Link) seen(peer string, m *BidMessage, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bids[peer] = received{msg: m, at: now}
	s := l.status[peer]
	s.lastBid = now
	if !s.up {
		s.up, s.since = true, now
		l.cfg.Logger.Info("federation: peer up", "peer", peer)
	}
}

// Commit carries out a lease command this lab issues, as the two-cluster
// commit of docs/federation.md: a grant or renewal is committed by the
// other party first, then here (if the other party refuses or does not
// answer, nothing is committed here: a renewal not made lets the lease
// run out); a reclaim or release is committed here first and then told
// to the other party; an expire is this lab's alone. For a reclaim or
// release, an error wrapping ErrUnreachable or ErrRefused after the
// local commit means only that the other party was not told (its ledger
// expires the lease).
func (l *Link) Commit(ctx context.Context, c federation.Command) error {
	if c.From != l.cfg.Name {
		return fmt.Errorf("%w: %s command issued by %s, not by this cluster (%s)", ErrConfig, c.Op, c.From, l.cfg.Name)
	}
	if c.Op == federation.OpExpire {
		return l.apply(ctx, c)
	}
	st := l.cfg.Store.LocalState()
	if st.Fed == nil {
		return fmt.Errorf("%w: the cluster has no federation configuration yet", state.ErrNoFederation)
	}
	// The issuer's own ledger checks first, so that a command it would
	// refuse is never proposed to the other party.
	lab, _ := st.FedLab()
	lg := st.Fed.Ledger.Clone()
	if err := lg.Relabel(lab); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := lg.Check(c); err != nil {
		return fmt.Errorf("%w: %w", state.ErrLeaseRefused, err)
	}
	var other string
	switch c.Op {
	case federation.OpGrant:
		other = c.Borrower
		if c.Lender == l.cfg.Name {
			break
		}
		return fmt.Errorf("%w: grant of lease %s by its borrower", ErrConfig, c.Lease)
	default:
		le, _ := st.Fed.Ledger.Lease(c.Lease) // Check found it
		other = le.Lender
		if other == l.cfg.Name {
			other = le.Borrower
		}
	}
	body, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch c.Op {
	case federation.OpGrant, federation.OpRenew:
		if err := l.post(ctx, other, PathLease, body); err != nil {
			return err
		}
		return l.apply(ctx, c)
	default:
		if err := l.apply(ctx, c); err != nil {
			return err
		}
		return l.post(ctx, other, PathLease, body)
	}
}

func (l *Link) apply(ctx context.Context, c federation.Command) error {
	return l.cfg.Store.ApplyCommand(ctx, &state.Lease{Cmd: c})
}

// maxAnswer bounds a peer's answer.
const maxAnswer = 64 << 10

// post sends body to path on peer: to the address that answered last,
// then the others, until one answers. A refusal (4xx) is not retried
// elsewhere.
func (l *Link) post(ctx context.Context, peer, path string, body []byte) error {
	pc := l.clients[peer]
	if pc == nil {
		return fmt.Errorf("%w: %s is not a peer", ErrConfig, peer)
	}
	addrs := l.addresses(peer, pc)
	pc.mu.Lock()
	first := pc.next
	pc.mu.Unlock()
	var errs []error
	for i := range addrs {
		idx := (first + i) % len(addrs)
		addr := addrs[idx]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+path, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := pc.http.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		text, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			pc.mu.Lock()
			pc.next = idx
			pc.mu.Unlock()
			return nil
		case resp.StatusCode >= 400 && resp.StatusCode < 500:
			return fmt.Errorf("%w: %s at %s: %s", ErrRefused, peer, addr, answerText(text, resp.Status))
		}
		errs = append(errs, fmt.Errorf("%s: %s", addr, answerText(text, resp.Status)))
	}
	return fmt.Errorf("%w: %s: %w", ErrUnreachable, peer, errors.Join(errs...))
}

// addresses are a peer's federation addresses: the file's, then those
// its servers advertise in the gossip pool.
func (l *Link) addresses(peer string, pc *peerClient) []string {
	addrs := pc.addrs
	if l.cfg.Gossip == nil {
		return addrs
	}
	for _, m := range l.cfg.Gossip() {
		if c, _, ok := strings.Cut(m.Name, "/"); ok && c == peer && m.Meta.FederationAddr != "" && !slices.Contains(addrs, m.Meta.FederationAddr) {
			addrs = append(slices.Clone(addrs), m.Meta.FederationAddr)
		}
	}
	return addrs
}

// answer is the body of every answer of the federation listener.
type answer struct {
	Error string `json:"error,omitempty"`
}

func answerText(b []byte, status string) string {
	var a answer
	if json.Unmarshal(b, &a) == nil && a.Error != "" {
		return a.Error
	}
	return status
}

// ServeHTTP is the federation listener's handler: it authenticates the
// peer (the certificate's cluster, the CA that verified it, through the
// lab's Trusts), checks that the message comes from that cluster, and
// commits a lease command or records a bid. Every refusal is logged
// once at WARN, naming the peer.
func (l *Link) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case PathLease, PathBid, PathOrder, PathAck, PathReport:
	default:
		reply(w, http.StatusNotFound, "no such federation endpoint; POST "+PathBid+", "+PathLease+", "+PathOrder+", "+PathAck+" or "+PathReport)
		return
	}
	if r.Method != http.MethodPost {
		reply(w, http.StatusMethodNotAllowed, "POST only")
		return
	}
	peer := r.RemoteAddr
	if r.TLS == nil {
		l.refuse(w, r, peer, http.StatusForbidden, fmt.Errorf("%w: not over TLS", ErrRefused))
		return
	}
	// Certificates are valid by the wall clock, whatever clock leases use.
	id, ca, err := pki.FederationPeer(r.TLS.PeerCertificates, l.cfg.Federation.Pools, x509.ExtKeyUsageClientAuth, time.Now())
	if err != nil {
		l.refuse(w, r, peer, http.StatusForbidden, err)
		return
	}
	peer = id.Cluster
	st := l.cfg.Store.LocalState()
	lab, ok := st.FedLab()
	if !ok {
		reply(w, http.StatusServiceUnavailable, "fedlink: the cluster has not joined its federation yet")
		return
	}
	if err := lab.Trusts(id.Cluster, ca); err != nil {
		l.refuse(w, r, peer, http.StatusForbidden, err)
		return
	}
	limit := int64(federation.MaxCommandBytes)
	switch r.URL.Path {
	case PathBid:
		limit = maxBidBytes
	case PathOrder, PathAck, PathReport:
		limit = maxOrderBytes
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		reply(w, http.StatusBadRequest, "fedlink: reading the request: "+err.Error())
		return
	}
	switch r.URL.Path {
	case PathBid:
		if l.redirect(w, r) {
			return
		}
		l.serveBid(w, r, peer, b)
		return
	case PathOrder:
		if l.redirect(w, r) {
			return
		}
		l.serveOrder(w, r, peer, b)
		return
	case PathAck, PathReport:
		if l.redirect(w, r) {
			return
		}
		l.serveRelay(w, r, peer, b)
		return
	}
	c, err := federation.DecodeCommand(b)
	switch {
	case err != nil:
		l.refuse(w, r, peer, http.StatusBadRequest, err)
		return
	case c.From != peer:
		l.refuse(w, r, peer, http.StatusForbidden, fmt.Errorf("%w: %s command from %q, sent by %s", ErrRefused, c.Op, c.From, peer))
		return
	}
	if le, ok := st.Fed.Ledger.Lease(c.Lease); ok && c.Op == federation.OpRenew && le.Lender != peer {
		// The ledger refuses it too; said here in the protocol's words.
		l.refuse(w, r, peer, http.StatusForbidden, fmt.Errorf("%w: renewal of lease %s by %s: only its lender %s extends a lease, "+
			"on its own clock and with its own time to live (a borrower asks by bidding for the GPUs)", ErrRefused, c.Lease, peer, le.Lender))
		return
	}
	err = l.apply(r.Context(), c)
	switch {
	case err == nil:
		reply(w, http.StatusOK, "")
	case errors.Is(err, state.ErrLeaseRefused), errors.Is(err, state.ErrInvalid), errors.Is(err, state.ErrNoFederation):
		l.refuse(w, r, peer, http.StatusConflict, err)
	default:
		reply(w, http.StatusServiceUnavailable, "fedlink: committing: "+err.Error())
	}
}

// redirect answers a request that only the leader serves when this
// server does not lead: to the leader's federation address, or 503.
func (l *Link) redirect(w http.ResponseWriter, r *http.Request) bool {
	if _, leader := l.cfg.Store.Leadership(); leader {
		return false
	}
	if addr := l.cfg.LeaderAddr(); addr != "" {
		w.Header().Set("Location", "https://"+addr+r.URL.Path)
		reply(w, http.StatusTemporaryRedirect, "fedlink: the leader's federation address is "+addr)
		return true
	}
	reply(w, http.StatusServiceUnavailable, "fedlink: not the leader, and the leader is not known")
	return true
}

func (l *Link) serveBid(w http.ResponseWriter, r *http.Request, peer string, b []byte) {
	m, err := DecodeBid(b)
	switch {
	case err != nil:
		l.refuse(w, r, peer, http.StatusBadRequest, err)
		return
	case m.From != peer:
		l.refuse(w, r, peer, http.StatusForbidden, fmt.Errorf("%w: bid from %q, sent by %s", ErrRefused, m.From, peer))
		return
	}
	l.seen(peer, m, l.cfg.Now())
	reply(w, http.StatusOK, "")
}

func (l *Link) refuse(w http.ResponseWriter, r *http.Request, peer string, code int, err error) {
	l.cfg.Logger.Warn("federation: refused", "peer", peer, "addr", r.RemoteAddr, "path", r.URL.Path, "err", err.Error())
	reply(w, code, err.Error())
}

func reply(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(answer{Error: strings.TrimSpace(msg)})
}

// Settings are the federation's terms of lending this link plans with.
func (l *Link) Settings() federation.Settings { return l.cfg.Federation.Settings }
