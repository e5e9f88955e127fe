package federation

import (
	"fmt"
	"slices"
	"sort"
)

// maxEnded is how many ended leases a ledger remembers (to tell a
// renewal of an expired lease from one of a lease that never was).
const maxEnded = 4096

// Lease is GPUs of a lender's nodes, lent to a borrower until Expires
// unless renewed.
type Lease struct {
	ID       string     `json:"id"`
	Lender   string     `json:"lender"`
	Borrower string     `json:"borrower"`
	Nodes    []NodeGPUs `json:"nodes"`
	// Granted and Expires are times in seconds on the lender's clock;
	// TTL is the time to live each renewal extends the lease by.
	Granted float64 `json:"granted"`
	Expires float64 `json:"expires"`
	TTL     float64 `json:"ttl_s"`
}

// GPUs is the GPUs the lease lends.
func (l *Lease) GPUs() int {
	g := 0
	for _, n := range l.Nodes {
		g += n.GPUs
	}
	return g
}

// End is why a lease ended.
type End string

// The ends of a lease.
const (
	EndReclaimed End = "reclaimed"
	EndReleased  End = "released"
	EndExpired   End = "expired"
)

// ended is what a ledger remembers of a lease that ended.
type ended struct {
	why End
	at  float64
}

// Ledger is the leases one cluster is party to, as its Raft state machine
// holds them: it lends GPUs of its own nodes and borrows GPUs of peers'.
// Apply is deterministic: the same commands in the same order give the
// same ledger on every replica. Not safe for concurrent use.
type Ledger struct {
	self   Lab
	leases map[string]*Lease
	ends   map[string]ended
	order  []string // ended lease IDs, oldest first
	// lentOn is the GPUs of each own node that are lent out.
	lentOn         map[string]int
	lent, borrowed int
	// reclaimed is when the lab last reclaimed a lease for its own jobs
	// (0: never).
	reclaimed float64
}

// NewLedger returns the empty ledger of the lab self.
func NewLedger(self Lab) (*Ledger, error) {
	if err := self.Validate(); err != nil {
		return nil, err
	}
	self.Nodes = slices.Clone(self.Nodes)
	self.Peers = slices.Clone(self.Peers)
	return &Ledger{self: self, leases: map[string]*Lease{}, ends: map[string]ended{}, lentOn: map[string]int{}}, nil
}

// Clone is an independent copy of the ledger (to try commands on).
func (lg *Ledger) Clone() *Ledger {
	c := *lg
	c.leases = make(map[string]*Lease, len(lg.leases))
	for id, l := range lg.leases {
		cl := clone(l)
		c.leases[id] = &cl
	}
	c.ends = make(map[string]ended, len(lg.ends))
	for id, e := range lg.ends {
		c.ends[id] = e
	}
	c.order = slices.Clone(lg.order)
	c.lentOn = make(map[string]int, len(lg.lentOn))
	for id, g := range lg.lentOn {
		c.lentOn[id] = g
	}
	return &c
}

// Self is the lab whose ledger this is.
func (lg *Ledger) Self() *Lab { return &lg.self }

// Lent and Borrowed are the GPUs the lab lends and borrows under active
// leases.
func (lg *Ledger) Lent() int     { return lg.lent }
func (lg *Ledger) Borrowed() int { return lg.borrowed }

// LastReclaim is when the lab last reclaimed a lease for its own jobs
// (not to rebalance), 0 if never.
func (lg *Ledger) LastReclaim() float64 { return lg.reclaimed }

// LentOn is the GPUs of the lab's node id that are lent out.
func (lg *Ledger) LentOn(id string) int { return lg.lentOn[id] }

// Leases are the active leases, sorted by ID (copies).
func (lg *Ledger) Leases() []Lease {
	out := make([]Lease, 0, len(lg.leases))
	for _, l := range lg.leases {
		out = append(out, clone(l))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// Lease returns the active lease id.
func (lg *Ledger) Lease(id string) (Lease, bool) {
	l, ok := lg.leases[id]
	if !ok {
		return Lease{}, false
	}
	return clone(l), true
}

func clone(l *Lease) Lease {
	c := *l
	c.Nodes = slices.Clone(l.Nodes)
	return c
}

// Apply applies one command, or refuses it and changes nothing. It
// returns the leases the command granted, renewed or ended.
func (lg *Ledger) Apply(c Command) ([]Lease, error) { return lg.apply(c, false) }

// Check reports whether Apply would accept the command, changing
// nothing: a command that concerns two clusters is checked by both
// before either applies it.
func (lg *Ledger) Check(c Command) error {
	_, err := lg.apply(c, true)
	return err
}

func (lg *Ledger) apply(c Command, dry bool) ([]Lease, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.From != lg.self.Name && !lg.self.peer(c.From) {
		return nil, fmt.Errorf("%w: %s command from %s, which is not a peer of %s", ErrUnknownPeer, c.Op, c.From, lg.self.Name)
	}
	switch c.Op {
	case OpGrant:
		return lg.grant(c, dry)
	case OpExpire:
		if c.From != lg.self.Name {
			return nil, fmt.Errorf("%w: %s may not expire the leases of %s (a cluster expires its own by its clock)", ErrNotParty, c.From, lg.self.Name)
		}
		if dry {
			return nil, nil
		}
		return lg.expire(c.At), nil
	}
	l, err := lg.live(c)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Op == OpReclaim && c.From != l.Lender:
		return nil, fmt.Errorf("%w: %s may not reclaim lease %s (only its lender %s)", ErrNotParty, c.From, l.ID, l.Lender)
	case c.Op == OpRelease && c.From != l.Borrower:
		return nil, fmt.Errorf("%w: %s may not release lease %s (only its borrower %s)", ErrNotParty, c.From, l.ID, l.Borrower)
	case c.Op == OpRenew && c.From != l.Lender:
		return nil, fmt.Errorf("%w: %s may not renew lease %s (only its lender %s extends it, on its own clock)", ErrNotParty, c.From, l.ID, l.Lender)
	case dry:
		return nil, nil
	}
	switch c.Op {
	case OpRenew:
		ttl := l.TTL
		if c.TTL > 0 {
			ttl = c.TTL
		}
		l.TTL = ttl
		l.Expires = max(l.Expires, c.At+ttl)
		return []Lease{clone(l)}, nil
	case OpReclaim:
		if c.Reason == ReasonNeed && l.Lender == lg.self.Name {
			lg.reclaimed = max(lg.reclaimed, c.At)
		}
		return []Lease{lg.end(l, EndReclaimed, c.At)}, nil
	default: // OpRelease
		return []Lease{lg.end(l, EndReleased, c.At)}, nil
	}
}

// live finds the active, unexpired lease a renew, reclaim or release
// names, issued by one of its parties.
func (lg *Ledger) live(c Command) (*Lease, error) {
	l, ok := lg.leases[c.Lease]
	if !ok {
		if e, ok := lg.ends[c.Lease]; ok {
			if e.why == EndExpired {
				return nil, fmt.Errorf("%w: %s of lease %s, which expired at %.0f s", ErrExpired, c.Op, c.Lease, e.at)
			}
			return nil, fmt.Errorf("%w: %s of lease %s, which was %s at %.0f s", ErrUnknownLease, c.Op, c.Lease, e.why, e.at)
		}
		return nil, fmt.Errorf("%w: %s of lease %s, which %s does not hold", ErrUnknownLease, c.Op, c.Lease, lg.self.Name)
	}
	if c.From != l.Lender && c.From != l.Borrower {
		return nil, fmt.Errorf("%w: %s of lease %s from %s (its parties are %s and %s)", ErrNotParty, c.Op, l.ID, c.From, l.Lender, l.Borrower)
	}
	if c.At >= l.Expires {
		return nil, fmt.Errorf("%w: %s of lease %s at %.0f s, which expired at %.0f s", ErrExpired, c.Op, l.ID, c.At, l.Expires)
	}
	return l, nil
}

// grant validates and records a new lease.
func (lg *Ledger) grant(c Command, dry bool) ([]Lease, error) {
	self := lg.self.Name
	if c.From != c.Lender {
		return nil, fmt.Errorf("%w: lease %s granted by %s, not by its lender %s", ErrNotParty, c.Lease, c.From, c.Lender)
	}
	var other string
	switch self {
	case c.Lender:
		other = c.Borrower
	case c.Borrower:
		other = c.Lender
	default:
		return nil, fmt.Errorf("%w: lease %s between %s and %s recorded at %s", ErrNotParty, c.Lease, c.Lender, c.Borrower, self)
	}
	if !lg.self.peer(other) {
		return nil, fmt.Errorf("%w: lease %s with %s, which is not a peer of %s", ErrUnknownPeer, c.Lease, other, self)
	}
	if _, ok := lg.leases[c.Lease]; ok {
		return nil, fmt.Errorf("%w: lease %s is active", ErrLeaseExists, c.Lease)
	}
	if _, ok := lg.ends[c.Lease]; ok {
		return nil, fmt.Errorf("%w: lease %s has ended and its ID may not be reused", ErrLeaseExists, c.Lease)
	}
	g := 0
	for _, n := range c.Nodes {
		g += n.GPUs
	}
	if self == c.Lender {
		for _, n := range c.Nodes {
			node, ok := lg.self.Node(n.Node)
			if !ok {
				return nil, fmt.Errorf("%w: lease %s names node %s, which %s does not own", ErrNotOwner, c.Lease, n.Node, self)
			}
			if n.GPUs > node.GPUs {
				return nil, fmt.Errorf("%w: lease %s names %d GPUs of node %s, which has %d", ErrNotOwner, c.Lease, n.GPUs, n.Node, node.GPUs)
			}
			if lent := lg.lentOn[n.Node]; lent+n.GPUs > node.GPUs {
				return nil, fmt.Errorf("%w: lease %s names %d GPUs of node %s, of which %d of %d are lent already", ErrNodeLeased, c.Lease, n.GPUs, n.Node, lent, node.GPUs)
			}
		}
		if q := lg.self.Quota; lg.lent+g > q.LendingLimit {
			return nil, fmt.Errorf("%w: lease %s of %d GPUs: %s lends %d already, its lending limit is %d", ErrLendingLimit, c.Lease, g, self, lg.lent, q.LendingLimit)
		}
	} else if q := lg.self.Quota; lg.borrowed+g > q.BorrowingLimit {
		return nil, fmt.Errorf("%w: lease %s of %d GPUs: %s borrows %d already, its borrowing limit is %d", ErrBorrowingLimit, c.Lease, g, self, lg.borrowed, q.BorrowingLimit)
	}
	if dry {
		return nil, nil
	}
	l := &Lease{ID: c.Lease, Lender: c.Lender, Borrower: c.Borrower, Nodes: slices.Clone(c.Nodes), Granted: c.At, Expires: c.At + c.TTL, TTL: c.TTL}
	lg.leases[l.ID] = l
	if self == c.Lender {
		lg.lent += g
		for _, n := range l.Nodes {
			lg.lentOn[n.Node] += n.GPUs
		}
	} else {
		lg.borrowed += g
	}
	return []Lease{clone(l)}, nil
}

// expire ends every lease whose time to live ran out by at, in ID order.
func (lg *Ledger) expire(at float64) []Lease {
	var ids []string
	for id, l := range lg.leases {
		if l.Expires <= at {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := make([]Lease, 0, len(ids))
	for _, id := range ids {
		l := lg.leases[id]
		out = append(out, lg.end(l, EndExpired, l.Expires))
	}
	return out
}

// end removes an active lease and remembers why it ended.
func (lg *Ledger) end(l *Lease, why End, at float64) Lease {
	delete(lg.leases, l.ID)
	g := l.GPUs()
	if l.Lender == lg.self.Name {
		lg.lent -= g
		for _, n := range l.Nodes {
			if lg.lentOn[n.Node] -= n.GPUs; lg.lentOn[n.Node] == 0 {
				delete(lg.lentOn, n.Node)
			}
		}
	} else {
		lg.borrowed -= g
	}
	lg.ends[l.ID] = ended{why: why, at: at}
	lg.order = append(lg.order, l.ID)
	if len(lg.order) > maxEnded {
		delete(lg.ends, lg.order[0])
		lg.order = lg.order[1:]
	}
	return clone(l)
}

// Order is a borrower's request to run Workers on GPUs of a lender's
// node, which the lender's control plane checks before it starts them.
type Order struct {
	Borrower string  `json:"borrower"`
	Node     string  `json:"node"`
	GPUs     int     `json:"gpus"`
	At       float64 `json:"at"`
}

// Authorize checks, on the lender, that an order stays within the GPUs
// the borrower leases on the node at the order's time.
func (lg *Ledger) Authorize(o Order) error {
	if o.Borrower == lg.self.Name || !lg.self.peer(o.Borrower) {
		return fmt.Errorf("%w: order from %s, which is not a peer of %s", ErrUnknownPeer, o.Borrower, lg.self.Name)
	}
	if _, ok := lg.self.Node(o.Node); !ok {
		return fmt.Errorf("%w: %s ordered GPUs of node %s, which %s does not own", ErrNotLeased, o.Borrower, o.Node, lg.self.Name)
	}
	if o.GPUs < 1 {
		return fmt.Errorf("%w: order for %d GPUs", ErrBadCommand, o.GPUs)
	}
	leased := 0
	for _, l := range lg.leases {
		if l.Borrower != o.Borrower || l.Expires <= o.At {
			continue
		}
		for _, n := range l.Nodes {
			if n.Node == o.Node {
				leased += n.GPUs
			}
		}
	}
	if o.GPUs > leased {
		return fmt.Errorf("%w: %s ordered %d GPUs of node %s at %.0f s and leases %d there", ErrNotLeased, o.Borrower, o.GPUs, o.Node, o.At, leased)
	}
	return nil
}
