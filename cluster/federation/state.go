package federation

import (
	"fmt"
	"math"
	"slices"
)

// Ended is what a ledger remembers of a lease that ended: its ID, why
// and when.
type Ended struct {
	ID  string  `json:"id"`
	Why End     `json:"why"`
	At  float64 `json:"at"`
}

// LedgerState is everything a ledger holds besides its lab: what a Raft
// snapshot stores. Leases are sorted by ID; Ended is oldest first (the
// order in which the ledger forgets them).
type LedgerState struct {
	Leases      []Lease `json:"leases"`
	Ended       []Ended `json:"ended"`
	LastReclaim float64 `json:"last_reclaim"`
}

// MaxEnded is how many ended leases a ledger remembers.
const MaxEnded = maxEnded

// State is a copy of the ledger's leases, ended leases and last reclaim.
func (lg *Ledger) State() LedgerState {
	st := LedgerState{Leases: lg.Leases(), LastReclaim: lg.reclaimed}
	if len(lg.order) > 0 {
		st.Ended = make([]Ended, 0, len(lg.order))
		for _, id := range lg.order {
			e := lg.ends[id]
			st.Ended = append(st.Ended, Ended{ID: id, Why: e.why, At: e.at})
		}
	}
	return st
}

// Relabel replaces the ledger's description of its own lab (its nodes,
// quota, CA and peers change while leases run: nodes join and leave, the
// federation file is edited). The name may not change. Leases in force
// stay, even with a peer no longer listed: they run until they end.
func (lg *Ledger) Relabel(self Lab) error {
	if self.Name != lg.self.Name {
		return fmt.Errorf("%w: the ledger is %s's, not %s's", ErrBadConfig, lg.self.Name, self.Name)
	}
	if err := self.Validate(); err != nil {
		return err
	}
	self.Nodes = slices.Clone(self.Nodes)
	self.Peers = slices.Clone(self.Peers)
	lg.self = self
	return nil
}

// RestoreLedger rebuilds the ledger of lab self from a state that came
// from outside (a snapshot): every lease must be well formed and have
// self as one party, IDs unique, ended leases at most MaxEnded and
// distinct from the active ones. Quotas are not checked against the
// leases (a quota lowered while leases ran is honoured by refusing new
// grants, not by ending those).
func RestoreLedger(self Lab, st LedgerState) (*Ledger, error) {
	lg, err := NewLedger(self)
	if err != nil {
		return nil, err
	}
	if !finiteTime(st.LastReclaim) {
		return nil, fmt.Errorf("%w: last reclaim at %v", ErrBadConfig, st.LastReclaim)
	}
	lg.reclaimed = st.LastReclaim
	for i, l := range st.Leases {
		if i > 0 && l.ID <= st.Leases[i-1].ID {
			return nil, fmt.Errorf("%w: lease %s out of order", ErrBadConfig, l.ID)
		}
		if err := checkLease(&l, self.Name); err != nil {
			return nil, err
		}
		cl := clone(&l)
		lg.leases[l.ID] = &cl
		g := l.GPUs()
		if l.Lender == self.Name {
			lg.lent += g
			for _, n := range l.Nodes {
				lg.lentOn[n.Node] += n.GPUs
			}
		} else {
			lg.borrowed += g
		}
	}
	if len(st.Ended) > maxEnded {
		return nil, fmt.Errorf("%w: %d ended leases, at most %d are kept", ErrBadConfig, len(st.Ended), maxEnded)
	}
	for _, e := range st.Ended {
		switch {
		case !validLeaseID(e.ID):
			return nil, fmt.Errorf("%w: ended lease ID %q", ErrBadConfig, e.ID)
		case e.Why != EndReclaimed && e.Why != EndReleased && e.Why != EndExpired:
			return nil, fmt.Errorf("%w: lease %s ended as %q", ErrBadConfig, e.ID, e.Why)
		case !finiteTime(e.At):
			return nil, fmt.Errorf("%w: lease %s ended at %v", ErrBadConfig, e.ID, e.At)
		}
		if _, ok := lg.leases[e.ID]; ok {
			return nil, fmt.Errorf("%w: lease %s both active and ended", ErrBadConfig, e.ID)
		}
		if _, ok := lg.ends[e.ID]; ok {
			return nil, fmt.Errorf("%w: lease %s ended twice", ErrBadConfig, e.ID)
		}
		lg.ends[e.ID] = ended{why: e.Why, at: e.At}
		lg.order = append(lg.order, e.ID)
	}
	return lg, nil
}

// checkLease checks a lease read from outside, held by lab self.
func checkLease(l *Lease, self string) error {
	c := Command{Op: OpGrant, From: l.Lender, Lease: l.ID, Lender: l.Lender, Borrower: l.Borrower, Nodes: l.Nodes, At: l.Granted, TTL: l.TTL}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: lease %q: %w", ErrBadConfig, l.ID, err)
	}
	if l.Lender != self && l.Borrower != self {
		return fmt.Errorf("%w: lease %s between %s and %s held by %s", ErrBadConfig, l.ID, l.Lender, l.Borrower, self)
	}
	if !finiteTime(l.Expires) || l.Expires < l.Granted {
		return fmt.Errorf("%w: lease %s granted at %v expires at %v", ErrBadConfig, l.ID, l.Granted, l.Expires)
	}
	return nil
}

func finiteTime(v float64) bool { return v >= 0 && v <= 2*maxTime && !math.IsInf(v, 0) }
