package federation

import (
	"encoding/json"
	"fmt"

	"pollux/internal/jsonin"
)

// Bounds of a command.
const (
	// MaxTTL bounds a lease's time to live, in seconds.
	MaxTTL = 86400
	// MaxLeaseNodes bounds the nodes one lease names.
	MaxLeaseNodes = 1024
	// MaxCommandBytes bounds an encoded command.
	MaxCommandBytes = 64 << 10
	// maxTime bounds command times (seconds on the caller's clock; Unix
	// seconds fit).
	maxTime = 1e12
)

// Op is what a command does to a lease.
type Op string

// The operations. A grant is issued by the lender, a release by the
// borrower, a renewal by the lender (the borrower asks for one by
// bidding for the GPUs; the lender decides, on its own clock and with
// its own time to live), a reclaim by the lender (its jobs need the GPUs
// back), and expire by a cluster to its own ledger as its clock passes
// (every lease whose time to live ran out ends).
const (
	OpGrant   Op = "grant"
	OpRenew   Op = "renew"
	OpReclaim Op = "reclaim"
	OpRelease Op = "release"
	OpExpire  Op = "expire"
)

// NodeGPUs is GPUs of one of the lender's nodes.
type NodeGPUs struct {
	Node string `json:"node"`
	GPUs int    `json:"gpus"`
}

// Command is one change to the leases, as both parties' Raft logs carry
// it. From is the cluster that issued it; across clusters it must match
// the identity the transport authenticated.
type Command struct {
	Op       Op         `json:"op"`
	From     string     `json:"from"`
	Lease    string     `json:"lease,omitempty"`
	Lender   string     `json:"lender,omitempty"`
	Borrower string     `json:"borrower,omitempty"`
	Nodes    []NodeGPUs `json:"nodes,omitempty"`
	// At is when the command was decided, in seconds on the issuer's
	// clock.
	At float64 `json:"at"`
	// TTL is the lease's time to live in seconds (grant; a renewal may
	// give a new one, 0 keeps the lease's): the lender's lease_ttl_s.
	TTL float64 `json:"ttl_s,omitempty"`
	// Reason says why a lease is reclaimed: ReasonNeed (the default: the
	// lender's own jobs need the GPUs) or ReasonRebalance (another peer
	// gains clearly more from them).
	Reason Reason `json:"reason,omitempty"`
}

// Reason is why a lender reclaims a lease.
type Reason string

// The reasons of a reclaim.
const (
	ReasonNeed      Reason = ""
	ReasonRebalance Reason = "rebalance"
)

// Validate checks the command's shape (not whether a ledger accepts it).
func (c *Command) Validate() error {
	if !ValidName(c.From) {
		return fmt.Errorf("%w: issuing cluster %q", ErrBadCommand, c.From)
	}
	if !(c.At >= 0 && c.At <= maxTime) {
		return fmt.Errorf("%w: time %v, want a number of seconds in [0, %g]", ErrBadCommand, c.At, float64(maxTime))
	}
	if !(c.TTL >= 0 && c.TTL <= MaxTTL) {
		return fmt.Errorf("%w: time to live %v s, want (0, %d]", ErrBadCommand, c.TTL, MaxTTL)
	}
	switch c.Op {
	case OpExpire:
		if c.Lease != "" || c.Lender != "" || c.Borrower != "" || len(c.Nodes) > 0 || c.Reason != ReasonNeed {
			return fmt.Errorf("%w: expire takes only a time", ErrBadCommand)
		}
		return nil
	case OpGrant, OpRenew, OpReclaim, OpRelease:
	default:
		return fmt.Errorf("%w: operation %q, want grant, renew, reclaim, release or expire", ErrBadCommand, c.Op)
	}
	switch {
	case c.Reason != ReasonNeed && c.Reason != ReasonRebalance:
		return fmt.Errorf("%w: reason %q, want none or %q", ErrBadCommand, c.Reason, ReasonRebalance)
	case c.Reason != ReasonNeed && c.Op != OpReclaim:
		return fmt.Errorf("%w: only a reclaim gives a reason", ErrBadCommand)
	}
	if !validLeaseID(c.Lease) {
		return fmt.Errorf("%w: lease ID %q, want 1-128 printable characters", ErrBadCommand, c.Lease)
	}
	if c.Op != OpGrant {
		if c.Lender != "" || c.Borrower != "" || len(c.Nodes) > 0 {
			return fmt.Errorf("%w: %s names only the lease", ErrBadCommand, c.Op)
		}
		return nil
	}
	switch {
	case !ValidName(c.Lender) || !ValidName(c.Borrower):
		return fmt.Errorf("%w: grant between %q and %q", ErrBadCommand, c.Lender, c.Borrower)
	case c.Lender == c.Borrower:
		return fmt.Errorf("%w: %s cannot lease to itself", ErrBadCommand, c.Lender)
	case c.TTL <= 0:
		return fmt.Errorf("%w: grant without a time to live", ErrBadCommand)
	case len(c.Nodes) == 0 || len(c.Nodes) > MaxLeaseNodes:
		return fmt.Errorf("%w: grant of %d nodes, want 1-%d", ErrBadCommand, len(c.Nodes), MaxLeaseNodes)
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		switch {
		case !ValidName(n.Node):
			return fmt.Errorf("%w: node name %q", ErrBadCommand, n.Node)
		case seen[n.Node]:
			return fmt.Errorf("%w: node %s named twice", ErrBadCommand, n.Node)
		case n.GPUs < 1 || n.GPUs > MaxNodeGPUs:
			return fmt.Errorf("%w: %d GPUs of node %s, want 1-%d", ErrBadCommand, n.GPUs, n.Node, MaxNodeGPUs)
		}
		seen[n.Node] = true
	}
	return nil
}

func validLeaseID(s string) bool {
	if len(s) < 1 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}

// Encode is the command as JSON (what DecodeCommand reads).
func (c *Command) Encode() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(c)
}

// DecodeCommand reads one command from outside (a peer's message, a Raft
// log entry): exactly one JSON object of at most MaxCommandBytes, no
// unknown fields, valid.
func DecodeCommand(data []byte) (Command, error) {
	var c Command
	if len(data) > MaxCommandBytes {
		return c, fmt.Errorf("%w: %d bytes, want at most %d", ErrBadCommand, len(data), MaxCommandBytes)
	}
	if err := jsonin.Decode(data, &c); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	if err := c.Validate(); err != nil {
		return Command{}, err
	}
	return c, nil
}
