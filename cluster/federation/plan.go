package federation

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
)

// Settings are the federation's terms of lending.
type Settings struct {
	// TTL is a lease's time to live in seconds: a lease not renewed for
	// that long ends (a party that disappears stops renewing).
	TTL float64 `json:"lease_ttl_s"`
	// OwnerWeight (>= 1) is how much more a GPU is worth to the lab that
	// owns it than to a borrower: a lab lends when a borrower's bid beats
	// OwnerWeight times its own, and reclaims as soon as its own jobs'
	// gain times OwnerWeight reaches what the borrower would lose.
	OwnerWeight float64 `json:"owner_weight"`
	// Margin (in [0, 0.5)) is the fraction of a bid a move must keep
	// beyond the other side's value: moving GPUs costs both sides a
	// restart, so a grant needs bid * (1 - Margin) above the lender's
	// weighted loss, and moving a lease to another borrower needs its bid
	// * (1 - 2 Margin) above what the current borrower would lose.
	Margin float64 `json:"margin"`
	// PowerMean is the exponent p of the power mean of job speedups that
	// every lab's bid measures its GPUs by (see Curve): -1 as Pollux's
	// objective, 1 for the plain sum of speedups.
	PowerMean float64 `json:"power_mean"`
	// Cooldown is how long after reclaiming a lab does not lend, in
	// seconds: a lab whose jobs just needed its GPUs back is in a busy
	// period, and lending again at the first lull would make both sides
	// restart back and forth.
	Cooldown float64 `json:"lend_cooldown_s"`
	// MinHold is how long, in seconds from its grant, a borrower keeps a
	// lease its jobs no longer use before it releases it: a borrower's
	// bid goes up and down with its jobs round to round, and releasing
	// at the first dip only to be granted again at the next rise makes
	// both sides restart workers back and forth. Reclaims for the
	// owner's need are never held back (the owner's jobs start within a
	// round), nor are rebalances (they need a peer's clearly larger bid).
	// 0: release at once.
	MinHold float64 `json:"min_hold_s"`
}

// DefaultSettings are the terms the built-in example uses.
func DefaultSettings() Settings {
	return Settings{TTL: 300, OwnerWeight: 2, Margin: 0.1, Cooldown: 300, PowerMean: -1, MinHold: 120}
}

// Validate reports whether the terms are usable.
func (s Settings) Validate() error {
	switch {
	case !(s.TTL > 0 && s.TTL <= MaxTTL):
		return fmt.Errorf("%w: lease time to live %v s, want (0, %d]", ErrBadConfig, s.TTL, MaxTTL)
	case !(s.OwnerWeight >= 1 && s.OwnerWeight <= 1e6):
		return fmt.Errorf("%w: owner weight %v, want [1, 1e6]", ErrBadConfig, s.OwnerWeight)
	case !(s.Margin >= 0 && s.Margin < 0.5):
		return fmt.Errorf("%w: margin %v, want [0, 0.5)", ErrBadConfig, s.Margin)
	case !(s.PowerMean >= -10 && s.PowerMean <= 1):
		return fmt.Errorf("%w: power mean exponent %v, want [-10, 1]", ErrBadConfig, s.PowerMean)
	case !(s.Cooldown >= 0 && s.Cooldown <= MaxTTL):
		return fmt.Errorf("%w: lending cooldown %v s, want [0, %d]", ErrBadConfig, s.Cooldown, MaxTTL)
	case !(s.MinHold >= 0 && s.MinHold <= MaxTTL):
		return fmt.Errorf("%w: minimum hold %v s, want [0, %d]", ErrBadConfig, s.MinHold, MaxTTL)
	}
	return nil
}

// Bid is one lab's state going into a round, as its peers see it.
type Bid struct {
	// Lab is the lab's description (nodes, quota, peers).
	Lab *Lab
	// Curve is its jobs' value of each GPU (see Curve).
	Curve []float64
	// Used is, per own node, the GPUs its own jobs run on now: a lender
	// lends its least used nodes first.
	Used map[string]int
	// Reclaimable, when not nil, are the lent nodes the lab's allocator
	// would use now if they were back (from a what-if round of its
	// policy): only leases of such nodes are reclaimed, so that the
	// owner's jobs start on them in the round of the reclaim. Nil means
	// every lent node.
	Reclaimable map[string]bool
	// LastReclaim is when the lab last reclaimed a lease (0: never); it
	// does not lend within Settings.Cooldown of it.
	LastReclaim float64
}

// Round is the input of one federation round.
type Round struct {
	At       float64
	Settings Settings
	Bids     []Bid
	// Leases are the active leases between the labs.
	Leases []Lease
	// Decider, when set, keeps only the commands that lab issues: every
	// lab computes the same plan from the same bids and carries out its
	// own part of it.
	Decider string
}

// Plan decides one round: reclaims (an owner needs its GPUs back),
// releases (a borrower no longer uses them), rebalances (another peer
// gains clearly more), renewals, then grants of whole idle nodes to the
// peer that gains most. Labs are taken in name order and leases in ID
// order, so the same round gives the same commands; a lease runs one way
// between two labs (docs/federation.md).
func Plan(r Round) ([]Command, error) {
	if err := r.Settings.Validate(); err != nil {
		return nil, err
	}
	st, err := newPlanState(r)
	if err != nil {
		return nil, err
	}
	w, at := r.Settings.OwnerWeight, r.At
	var cmds []Command
	emit := func(c Command) {
		if r.Decider == "" || r.Decider == c.From {
			cmds = append(cmds, c)
		}
	}
	// Reclaims: each lender takes back leases, cheapest for the borrower
	// first, while its own gain (weighted) reaches the borrower's loss.
	for _, name := range st.names {
		lender := st.labs[name]
		for {
			best, bestKeep := -1, math.Inf(1)
			for i, l := range st.leases {
				if st.gone[i] || l.Lender != name || !lender.reclaimable(l) {
					continue
				}
				keep := st.labs[l.Borrower].top(l.GPUs()) / float64(l.GPUs())
				if keep < bestKeep {
					best, bestKeep = i, keep
				}
			}
			if best < 0 {
				break
			}
			l := st.leases[best]
			g := l.GPUs()
			gain := lender.next(g)
			if !(gain > 0) || w*gain < st.labs[l.Borrower].top(g) {
				break
			}
			st.drop(best)
			lender.reclaimedAt = at
			emit(Command{Op: OpReclaim, From: l.Lender, Lease: l.ID, At: at})
		}
	}
	// Releases: a borrower gives back leases its jobs would not use,
	// once it has held them for the minimum hold.
	for _, name := range st.names {
		b := st.labs[name]
		for i := len(st.leases) - 1; i >= 0; i-- {
			l := st.leases[i]
			if st.gone[i] || l.Borrower != name || b.top(l.GPUs()) > 0 || at-l.Granted < r.Settings.MinHold {
				continue
			}
			st.drop(i)
			emit(Command{Op: OpRelease, From: l.Borrower, Lease: l.ID, At: at})
		}
	}
	// Rebalances: a lender moves a lease to a peer that gains clearly
	// more from it than its borrower loses (both sides pay a restart, so
	// the bid is discounted by twice the margin): the lease is reclaimed
	// and its nodes granted to that peer in the same round.
	for i, l := range st.leases {
		if st.gone[i] {
			continue
		}
		lender := st.labs[l.Lender]
		g := l.GPUs()
		best := st.labs[l.Borrower].top(g)
		var to *labState
		for _, cn := range st.names {
			c := st.labs[cn]
			if cn == l.Lender || cn == l.Borrower || c.lentTo[l.Lender] > 0 || !lender.lab.peer(cn) || !c.lab.peer(l.Lender) || c.borrowed+g > c.lab.Quota.BorrowingLimit {
				continue
			}
			if bid := c.next(g) * (1 - 2*r.Settings.Margin); bid > best {
				to, best = c, bid
			}
		}
		if to == nil {
			continue
		}
		st.drop(i)
		emit(Command{Op: OpReclaim, From: l.Lender, Lease: l.ID, At: at, Reason: ReasonRebalance})
		st.lend(lender, to, g)
		emit(Command{
			Op: OpGrant, From: l.Lender, At: at, TTL: r.Settings.TTL,
			Lease:  leaseID(l.Lender, l.Nodes[0].Node, at),
			Lender: l.Lender, Borrower: to.lab.Name, Nodes: slices.Clone(l.Nodes),
		})
	}
	for i, l := range st.leases {
		if !st.gone[i] {
			emit(Command{Op: OpRenew, From: l.Lender, Lease: l.ID, At: at, TTL: r.Settings.TTL})
		}
	}
	// Grants: the pair with the largest surplus, one node at a time.
	for range 1 << 16 {
		var best struct {
			b, l    *labState
			node    Node
			surplus float64
		}
		for _, bn := range st.names {
			b := st.labs[bn]
			for _, ln := range st.names {
				l := st.labs[ln]
				if ln == bn || b.lentTo[ln] > 0 || !l.lab.peer(bn) || !b.lab.peer(ln) {
					continue
				}
				if l.reclaimedAt > 0 && at-l.reclaimedAt < r.Settings.Cooldown {
					continue
				}
				node, ok := l.lendable()
				if !ok {
					continue
				}
				g := node.GPUs
				if l.borrowed > 0 && !(l.top(g) > 0) {
					// Its idle GPUs are GPUs it borrows and keeps for the
					// minimum hold: it does not pass them on by lending
					// its own node.
					continue
				}
				if l.lent+g > l.lab.Quota.LendingLimit || b.borrowed+g > b.lab.Quota.BorrowingLimit {
					continue
				}
				s := b.next(g)*(1-r.Settings.Margin) - w*l.top(g)
				if s > best.surplus {
					best.b, best.l, best.node, best.surplus = b, l, node, s
				}
			}
		}
		if best.b == nil {
			break
		}
		g := best.node.GPUs
		st.lend(best.l, best.b, g)
		best.l.lentOn[best.node.ID] = g
		emit(Command{
			Op: OpGrant, From: best.l.lab.Name, At: at, TTL: r.Settings.TTL,
			Lease:  leaseID(best.l.lab.Name, best.node.ID, at),
			Lender: best.l.lab.Name, Borrower: best.b.lab.Name,
			Nodes: []NodeGPUs{{Node: best.node.ID, GPUs: g}},
		})
	}
	return cmds, nil
}

// leaseID names the lease of a lender's node granted at a time (a node is
// granted at most once per round).
func leaseID(lender, node string, at float64) string {
	return lender + "/" + node + "@" + strconv.FormatFloat(at, 'f', -1, 64)
}

// labState is one lab during planning.
type labState struct {
	lab                  *Lab
	curve                []float64
	used                 map[string]int
	wanted               map[string]bool
	reclaimedAt          float64
	held, lent, borrowed int
	// lentTo is the GPUs the lab lends to each peer (a lab does not
	// borrow from a peer it lends to).
	lentTo map[string]int
	// lentOn is the GPUs of each node that are lent or were freed in this
	// round (not lent again before the next).
	lentOn map[string]int
}

// value is the worth of the lab's (i+1)-th GPU.
func (s *labState) value(i int) float64 {
	if i < 0 || i >= len(s.curve) {
		return 0
	}
	return s.curve[i]
}

// next is what g more GPUs are worth to the lab.
func (s *labState) next(g int) float64 {
	v := 0.0
	for i := range g {
		v += s.value(s.held + i)
	}
	return v
}

// top is what the lab's last g GPUs are worth to it.
func (s *labState) top(g int) float64 {
	v := 0.0
	for i := 1; i <= g; i++ {
		v += s.value(s.held - i)
	}
	return v
}

// reclaimable reports whether the lab would use every node of l now.
func (s *labState) reclaimable(l Lease) bool {
	if s.wanted == nil {
		return true
	}
	for _, n := range l.Nodes {
		if !s.wanted[n.Node] {
			return false
		}
	}
	return true
}

// lendable is the node a lender would lend next: wholly unleased, the
// least used by its own jobs, the first in node order among equals.
func (s *labState) lendable() (Node, bool) {
	best, found := Node{}, false
	for _, n := range s.lab.Nodes {
		if s.lentOn[n.ID] > 0 {
			continue
		}
		if !found || s.used[n.ID] < s.used[best.ID] {
			best, found = n, true
		}
	}
	return best, found
}

type planState struct {
	names  []string
	labs   map[string]*labState
	leases []Lease
	gone   []bool
}

func newPlanState(r Round) (*planState, error) {
	st := &planState{labs: map[string]*labState{}}
	for _, b := range r.Bids {
		if b.Lab == nil {
			return nil, fmt.Errorf("%w: a bid without its lab", ErrBadConfig)
		}
		if _, dup := st.labs[b.Lab.Name]; dup {
			return nil, fmt.Errorf("%w: two bids of lab %s", ErrBadConfig, b.Lab.Name)
		}
		for _, v := range b.Curve {
			if !(v >= 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: lab %s bids %v for a GPU", ErrBadConfig, b.Lab.Name, v)
			}
		}
		st.labs[b.Lab.Name] = &labState{lab: b.Lab, curve: b.Curve, used: b.Used, wanted: b.Reclaimable, reclaimedAt: b.LastReclaim, held: b.Lab.GPUs(), lentTo: map[string]int{}, lentOn: map[string]int{}}
		st.names = append(st.names, b.Lab.Name)
	}
	sort.Strings(st.names)
	st.leases = append(st.leases, r.Leases...)
	sort.Slice(st.leases, func(a, b int) bool { return st.leases[a].ID < st.leases[b].ID })
	st.gone = make([]bool, len(st.leases))
	for _, l := range st.leases {
		lender, borrower := st.labs[l.Lender], st.labs[l.Borrower]
		if lender == nil || borrower == nil {
			return nil, fmt.Errorf("%w: lease %s between %s and %s, and not both bid", ErrUnknownPeer, l.ID, l.Lender, l.Borrower)
		}
		st.lend(lender, borrower, l.GPUs())
		for _, n := range l.Nodes {
			lender.lentOn[n.Node] += n.GPUs
		}
	}
	return st, nil
}

// drop ends lease i in the plan (its GPUs go back to the lender, and its
// nodes are not lent again this round).
func (st *planState) drop(i int) {
	st.gone[i] = true
	l := st.leases[i]
	st.lend(st.labs[l.Lender], st.labs[l.Borrower], -l.GPUs())
}

// lend moves g GPUs (g < 0: back) from lender to borrower in the plan.
func (st *planState) lend(lender, borrower *labState, g int) {
	lender.lent += g
	lender.held -= g
	lender.lentTo[borrower.lab.Name] += g
	borrower.borrowed += g
	borrower.held += g
}
