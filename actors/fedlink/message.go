package fedlink

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strings"

	"pollux/cluster/federation"
	"pollux/internal/jsonin"
)

// Paths of the federation listener.
const (
	// PathBid receives a peer's bid (a BidMessage), on its leader.
	PathBid = "/v1/federation/bid"
	// PathLease receives a lease command (federation.Command as JSON).
	PathLease = "/v1/federation/lease"
)

// maxBidBytes bounds an encoded bid.
const maxBidBytes = 8 << 20

// BidMessage is what a lab's leader sends every peer every interval:
// who it is (its nodes, quota and peers), its bid (the value of each GPU
// to its jobs, federation.Curve), how many GPUs of each of its nodes its
// own jobs use, when it last reclaimed a lease, and the leases it is
// party to (so that every lab plans on the same leases); and the host of
// each of its nodes' agents, as the lab knows it: a borrower whose job's
// first node is one of them puts the job's rendezvous there.
type BidMessage struct {
	From        string             `json:"from"`
	At          float64            `json:"at"`
	Lab         federation.Lab     `json:"lab"`
	Curve       []float64          `json:"curve"`
	Used        map[string]int     `json:"used,omitempty"`
	LastReclaim float64            `json:"last_reclaim"`
	Leases      []federation.Lease `json:"leases,omitempty"`
	Hosts       map[string]string  `json:"hosts,omitempty"`
}

// validHost reports whether h is an IP address or a DNS name.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if len(h) == 0 || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Validate checks a bid's shape: the lab is From's and valid, the curve
// finite and not negative, the use and hosts of the lab's nodes (a host
// an IP address or a DNS name), the leases well formed and each with the
// lab as a party.
func (m *BidMessage) Validate() error {
	if m.Lab.Name != m.From {
		return fmt.Errorf("%w: bid from %q describes lab %q", ErrBadMessage, m.From, m.Lab.Name)
	}
	if err := m.Lab.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if !(m.At >= 0 && m.At < 1e12) || !(m.LastReclaim >= 0 && m.LastReclaim < 1e12) {
		return fmt.Errorf("%w: bid times %v and %v", ErrBadMessage, m.At, m.LastReclaim)
	}
	if len(m.Curve) > federation.MaxNodes*federation.MaxNodeGPUs/16 {
		return fmt.Errorf("%w: a curve of %d GPUs", ErrBadMessage, len(m.Curve))
	}
	for _, v := range m.Curve {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: a GPU bid at %v", ErrBadMessage, v)
		}
	}
	for id, g := range m.Used {
		n, ok := m.Lab.Node(id)
		if !ok || g < 0 || g > n.GPUs {
			return fmt.Errorf("%w: %d GPUs used of node %q", ErrBadMessage, g, id)
		}
	}
	for id, h := range m.Hosts {
		if _, ok := m.Lab.Node(id); !ok || !validHost(h) {
			return fmt.Errorf("%w: host %q of node %q", ErrBadMessage, h, id)
		}
	}
	if !slices.IsSortedFunc(m.Leases, func(a, b federation.Lease) int { return strings.Compare(a.ID, b.ID) }) {
		return fmt.Errorf("%w: leases not sorted by ID", ErrBadMessage)
	}
	if _, err := federation.RestoreLedger(m.Lab, federation.LedgerState{Leases: m.Leases}); err != nil {
		return fmt.Errorf("%w: leases: %w", ErrBadMessage, err)
	}
	return nil
}

// DecodeBid reads one bid from a peer: one JSON object of at most
// maxBidBytes, no unknown fields, valid.
func DecodeBid(b []byte) (*BidMessage, error) {
	if len(b) > maxBidBytes {
		return nil, fmt.Errorf("%w: bid of %d bytes, at most %d", ErrBadMessage, len(b), maxBidBytes)
	}
	var m BidMessage
	if err := jsonin.Decode(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}
