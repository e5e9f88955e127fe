package state

import (
	"fmt"
	"slices"

	"pollux/cluster/federation"
)

// Federated lab clusters (issue 17, docs/federation.md). A lab's name,
// CA, quota and trusted peers are set by SetLab (the name once in the
// cluster's life), and the leases it is party to are its ledger
// (federation.Ledger), changed only by Lease commands: the FSM applies
// each through Ledger.Apply, so every replica of a lab and both parties
// of a lease check a command the same way, and a refused one (an expired
// lease, a grant beyond a quota, a node not owned) is the Result's error
// and changes nothing. The nodes a lab owns are its registered nodes that
// have not left, as the state holds them when the command applies.

// Command types 36..39 are the federation's.
const (
	typeLease  byte = 36
	typeSetLab byte = 37
)

// Federation is a lab's federation state: who it is and trusts (Lab, its
// Nodes empty: they are the state's nodes) and its ledger of leases.
type Federation struct {
	Lab    federation.Lab
	Ledger *federation.Ledger
}

func (f *Federation) clone() *Federation {
	if f == nil {
		return nil
	}
	c := &Federation{Lab: f.Lab, Ledger: f.Ledger.Clone()}
	c.Lab.Peers = clonePeers(f.Lab.Peers)
	return c
}

func clonePeers(ps []federation.Peer) []federation.Peer {
	out := slices.Clone(ps)
	for i := range out {
		out[i].CAs = slices.Clone(out[i].CAs)
	}
	return out
}

// FedLab is the lab as its ledger sees it: its description with the
// nodes it can lend (registered, alive, named as a federation node name
// must be) and its nominal quota and lending limit capped by their GPUs. ok is false when the cluster has no federation configuration.
func (s *State) FedLab() (federation.Lab, bool) {
	if s.Fed == nil {
		return federation.Lab{}, false
	}
	return labOf(s, s.Fed.Lab), true
}

func labOf(s *State, l federation.Lab) federation.Lab {
	l.Nodes = nil
	l.Peers = clonePeers(l.Peers)
	owned := 0
	for _, id := range s.NodeIDs() {
		n := s.Nodes[id]
		if n.Health != Alive || n.GPUs < 1 || !federation.ValidName(id) {
			continue
		}
		l.Nodes = append(l.Nodes, federation.Node{ID: id, GPUs: n.GPUs})
		owned += n.GPUs
	}
	l.Quota.Nominal = min(l.Quota.Nominal, owned)
	l.Quota.LendingLimit = min(l.Quota.LendingLimit, l.Quota.Nominal)
	return l
}

// SetLab sets the lab's federation identity: its name (once: a SetLab
// naming another is refused with ErrClusterConfig), the fingerprint of
// its CA, its quota and its peers (both replaced by every SetLab, so an
// edited federation file takes effect on restart; leases in force stay).
// With NameOnly (a server started with a name but no federation file)
// it only names a lab that has no name yet, with no quota and no peers,
// and otherwise checks the name and changes nothing.
type SetLab struct {
	Name     string
	CA       string
	Quota    federation.Quota
	Peers    []federation.Peer
	NameOnly bool
}

// Lease is one lease command (grant, renew, reclaim, release, expire),
// applied to the lab's ledger.
type Lease struct{ Cmd federation.Command }

func (c *SetLab) kind() byte { return typeSetLab }
func (c *SetLab) encode(w *writer) {
	w.str(c.Name)
	w.str(c.CA)
	encodeQuota(w, c.Quota)
	encodePeers(w, c.Peers)
	w.bool(c.NameOnly)
}
func (c *SetLab) decode(r *reader) {
	c.Name = r.str()
	c.CA = r.str()
	c.Quota = decodeQuota(r)
	c.Peers = decodePeers(r)
	c.NameOnly = r.bool()
}

func encodeQuota(w *writer, q federation.Quota) {
	w.int(q.Nominal)
	w.int(q.BorrowingLimit)
	w.int(q.LendingLimit)
}

func decodeQuota(r *reader) federation.Quota {
	return federation.Quota{Nominal: r.int(), BorrowingLimit: r.int(), LendingLimit: r.int()}
}

func encodePeers(w *writer, ps []federation.Peer) {
	w.uvarint(uint64(len(ps)))
	for _, p := range ps {
		w.str(p.Name)
		w.strs(p.CAs)
	}
}

func decodePeers(r *reader) []federation.Peer {
	n := r.length(federation.MaxPeers)
	var ps []federation.Peer
	for i := 0; i < n && r.err == nil; i++ {
		ps = append(ps, federation.Peer{Name: r.str(), CAs: r.strs(16)})
	}
	return ps
}

func (c *SetLab) validate() error {
	// The lab's nodes are the state's: check the description with a
	// quota it can hold without nodes, then the quota's own shape.
	l := federation.Lab{Name: c.Name, CA: c.CA, Peers: c.Peers, Quota: federation.Quota{BorrowingLimit: c.Quota.BorrowingLimit}}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c.NameOnly && (c.Quota != (federation.Quota{}) || len(c.Peers) > 0) {
		return invalid("a SetLab of the name only with a quota or peers")
	}
	if q := c.Quota; q.Nominal < 0 || q.Nominal > MaxNodes*1024 || q.LendingLimit < 0 || q.LendingLimit > q.Nominal {
		return invalid("quota: nominal %d, lending limit %d (want 0 <= lending limit <= nominal)", q.Nominal, q.LendingLimit)
	}
	return nil
}

func (c *Lease) kind() byte { return typeLease }
func (c *Lease) encode(w *writer) {
	m := &c.Cmd
	w.str(string(m.Op))
	w.str(m.From)
	w.str(m.Lease)
	w.str(m.Lender)
	w.str(m.Borrower)
	encodeLeaseNodes(w, m.Nodes)
	w.f64(m.At)
	w.f64(m.TTL)
	w.str(string(m.Reason))
}
func (c *Lease) decode(r *reader) {
	m := &c.Cmd
	m.Op = federation.Op(r.str())
	m.From = r.str()
	m.Lease = r.str()
	m.Lender = r.str()
	m.Borrower = r.str()
	m.Nodes = decodeLeaseNodes(r)
	m.At = r.f64()
	m.TTL = r.f64()
	m.Reason = federation.Reason(r.str())
}

func encodeLeaseNodes(w *writer, ns []federation.NodeGPUs) {
	w.uvarint(uint64(len(ns)))
	for _, n := range ns {
		w.str(n.Node)
		w.int(n.GPUs)
	}
}

func decodeLeaseNodes(r *reader) []federation.NodeGPUs {
	n := r.length(federation.MaxLeaseNodes)
	var ns []federation.NodeGPUs
	for i := 0; i < n && r.err == nil; i++ {
		ns = append(ns, federation.NodeGPUs{Node: r.str(), GPUs: r.int()})
	}
	return ns
}

func (c *Lease) validate() error {
	if err := c.Cmd.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func applySetLab(s *State, c *SetLab) error {
	l := federation.Lab{Name: c.Name, CA: c.CA, Quota: c.Quota, Peers: clonePeers(c.Peers)}
	if s.Fed == nil {
		lg, err := federation.NewLedger(labOf(s, l))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		s.Fed = &Federation{Lab: l, Ledger: lg}
		return nil
	}
	if s.Fed.Lab.Name != c.Name {
		return fmtErr(ErrClusterConfig, "this cluster is named %q (set once, when it was first started with a name), not %q", s.Fed.Lab.Name, c.Name)
	}
	if c.NameOnly {
		return nil
	}
	if err := s.Fed.Ledger.Relabel(labOf(s, l)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.Fed.Lab = l
	return nil
}

func applyLease(s *State, c *Lease) error {
	if s.Fed == nil {
		return fmtErr(ErrNoFederation, "%s of lease %q", c.Cmd.Op, c.Cmd.Lease)
	}
	// The ledger sees the lab's nodes as they are now; on refusal the
	// relabelled ledger is discarded with the rest.
	lg := s.Fed.Ledger.Clone()
	if err := lg.Relabel(labOf(s, s.Fed.Lab)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	ls, err := lg.Apply(c.Cmd)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLeaseRefused, err)
	}
	s.Fed.Ledger = lg
	emitLease(s, &c.Cmd, ls)
	return nil
}

// encodeFederation writes the federation state (snapshots of version 7):
// a presence flag, the lab, then the ledger (leases in ID order, ended
// leases oldest first, the last reclaim).
func encodeFederation(w *writer, f *Federation) {
	w.bool(f != nil)
	if f == nil {
		return
	}
	w.str(f.Lab.Name)
	w.str(f.Lab.CA)
	encodeQuota(w, f.Lab.Quota)
	encodePeers(w, f.Lab.Peers)
	st := f.Ledger.State()
	w.uvarint(uint64(len(st.Leases)))
	for _, l := range st.Leases {
		w.str(l.ID)
		w.str(l.Lender)
		w.str(l.Borrower)
		encodeLeaseNodes(w, l.Nodes)
		w.f64(l.Granted)
		w.f64(l.Expires)
		w.f64(l.TTL)
	}
	w.uvarint(uint64(len(st.Ended)))
	for _, e := range st.Ended {
		w.str(e.ID)
		w.str(string(e.Why))
		w.f64(e.At)
	}
	w.f64(st.LastReclaim)
}

// decodeFederation reads what encodeFederation wrote, for the state s
// whose nodes are decoded already, and validates it.
func decodeFederation(r *reader, s *State) (*Federation, error) {
	if !r.bool() || r.err != nil {
		return nil, r.err
	}
	c := SetLab{Name: r.str(), CA: r.str(), Quota: decodeQuota(r), Peers: decodePeers(r)}
	var st federation.LedgerState
	n := r.length(maxList)
	for i := 0; i < n && r.err == nil; i++ {
		st.Leases = append(st.Leases, federation.Lease{ID: r.str(), Lender: r.str(), Borrower: r.str(), Nodes: decodeLeaseNodes(r),
			Granted: r.f64(), Expires: r.f64(), TTL: r.f64()})
	}
	n = r.length(federation.MaxEnded)
	for i := 0; i < n && r.err == nil; i++ {
		st.Ended = append(st.Ended, federation.Ended{ID: r.str(), Why: federation.End(r.str()), At: r.f64()})
	}
	st.LastReclaim = r.f64()
	if r.err != nil {
		return nil, r.err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	l := federation.Lab{Name: c.Name, CA: c.CA, Quota: c.Quota, Peers: c.Peers}
	lg, err := federation.RestoreLedger(labOf(s, l), st)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Federation{Lab: l, Ledger: lg}, nil
}

// borrowedID reports whether id names a peer lab's node
// (federation.BorrowedID), as slots on GPUs the lab borrows do.
func borrowedID(id string) bool {
	_, _, ok := federation.SplitBorrowed(id)
	return ok
}
