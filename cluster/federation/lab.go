package federation

import (
	"fmt"
	"regexp"
	"slices"
)

// Bounds of a lab description.
const (
	// MaxNodes bounds the nodes of one lab.
	MaxNodes = 1 << 16
	// MaxNodeGPUs bounds the GPUs of one node.
	MaxNodeGPUs = 1024
	// MaxPeers bounds the peers one lab trusts.
	MaxPeers = 256
)

// nameRE is the shape of a cluster or node name: what a certificate can
// carry (cluster/pki) and what stays readable in logs.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ValidName reports whether s can name a cluster or a node.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Node is one machine a lab owns.
type Node struct {
	ID   string `json:"id"`
	GPUs int    `json:"gpus"`
}

// Quota is a lab's share of the federation, in the shape of a Kueue
// cohort member's: Nominal is the GPUs it is guaranteed (and reclaims
// from borrowers when its jobs need them), at most the GPUs it owns; it
// schedules at most Nominal + BorrowingLimit GPUs; at most LendingLimit of
// its GPUs are lent out at once.
type Quota struct {
	Nominal        int `json:"nominal_quota"`
	BorrowingLimit int `json:"borrowing_limit"`
	LendingLimit   int `json:"lending_limit"`
}

// Peer is a cluster a lab trusts, with the fingerprints of the CA
// certificates it accepts from it (several during a CA rotation).
type Peer struct {
	Name string   `json:"name"`
	CAs  []string `json:"cas"`
}

// Lab is one cluster of a federation as its own control plane knows it.
type Lab struct {
	// Name is the cluster's name, carried on every message that crosses
	// clusters.
	Name string `json:"name"`
	// CA is the fingerprint of the CA that signs the cluster's
	// certificates (the simulator accepts any label).
	CA    string `json:"ca"`
	Nodes []Node `json:"nodes"`
	Quota Quota  `json:"quota"`
	// Peers are the clusters this one trusts.
	Peers []Peer `json:"peers"`
}

// GPUs is the GPUs the lab owns.
func (l *Lab) GPUs() int {
	g := 0
	for _, n := range l.Nodes {
		g += n.GPUs
	}
	return g
}

// Node returns the lab's node named id.
func (l *Lab) Node(id string) (Node, bool) {
	for _, n := range l.Nodes {
		if n.ID == id {
			return n, true
		}
	}
	return Node{}, false
}

// Validate reports whether the lab description is usable.
func (l *Lab) Validate() error {
	if !ValidName(l.Name) {
		return fmt.Errorf("%w: cluster name %q, want 1-63 characters of [A-Za-z0-9._-] starting and ending with a letter or digit", ErrBadConfig, l.Name)
	}
	if l.CA == "" || len(l.CA) > 256 {
		return fmt.Errorf("%w: lab %s: CA fingerprint of %d bytes, want 1-256", ErrBadConfig, l.Name, len(l.CA))
	}
	if len(l.Nodes) > MaxNodes {
		return fmt.Errorf("%w: lab %s: %d nodes, want at most %d", ErrBadConfig, l.Name, len(l.Nodes), MaxNodes)
	}
	seen := map[string]bool{}
	for _, n := range l.Nodes {
		if !ValidName(n.ID) {
			return fmt.Errorf("%w: lab %s: node name %q", ErrBadConfig, l.Name, n.ID)
		}
		if seen[n.ID] {
			return fmt.Errorf("%w: lab %s: node %s listed twice", ErrBadConfig, l.Name, n.ID)
		}
		seen[n.ID] = true
		if n.GPUs < 1 || n.GPUs > MaxNodeGPUs {
			return fmt.Errorf("%w: lab %s: node %s has %d GPUs, want 1-%d", ErrBadConfig, l.Name, n.ID, n.GPUs, MaxNodeGPUs)
		}
	}
	q, owned := l.Quota, l.GPUs()
	switch {
	case q.Nominal < 0 || q.Nominal > owned:
		return fmt.Errorf("%w: lab %s: nominal quota %d, want 0-%d (the GPUs it owns)", ErrBadConfig, l.Name, q.Nominal, owned)
	case q.LendingLimit < 0 || q.LendingLimit > q.Nominal:
		return fmt.Errorf("%w: lab %s: lending limit %d, want 0-%d (its nominal quota)", ErrBadConfig, l.Name, q.LendingLimit, q.Nominal)
	case q.BorrowingLimit < 0 || q.BorrowingLimit > MaxNodes*MaxNodeGPUs:
		return fmt.Errorf("%w: lab %s: borrowing limit %d", ErrBadConfig, l.Name, q.BorrowingLimit)
	}
	if len(l.Peers) > MaxPeers {
		return fmt.Errorf("%w: lab %s: %d peers, want at most %d", ErrBadConfig, l.Name, len(l.Peers), MaxPeers)
	}
	peers := map[string]bool{}
	for _, p := range l.Peers {
		switch {
		case !ValidName(p.Name):
			return fmt.Errorf("%w: lab %s: peer name %q", ErrBadConfig, l.Name, p.Name)
		case p.Name == l.Name:
			return fmt.Errorf("%w: lab %s lists itself as a peer", ErrBadConfig, l.Name)
		case peers[p.Name]:
			return fmt.Errorf("%w: lab %s: peer %s listed twice", ErrBadConfig, l.Name, p.Name)
		case len(p.CAs) == 0 || len(p.CAs) > 16:
			return fmt.Errorf("%w: lab %s: peer %s has %d CA fingerprints, want 1-16", ErrBadConfig, l.Name, p.Name, len(p.CAs))
		}
		for _, ca := range p.CAs {
			if ca == "" || len(ca) > 256 {
				return fmt.Errorf("%w: lab %s: peer %s: CA fingerprint of %d bytes, want 1-256", ErrBadConfig, l.Name, p.Name, len(ca))
			}
		}
		peers[p.Name] = true
	}
	return nil
}

// Trusts checks that a message claiming to come from cluster, signed
// under the CA of fingerprint ca, may be believed: cluster must be a peer
// and ca one of the CAs it is trusted with.
func (l *Lab) Trusts(cluster, ca string) error {
	for _, p := range l.Peers {
		if p.Name != cluster {
			continue
		}
		if slices.Contains(p.CAs, ca) {
			return nil
		}
		return fmt.Errorf("%w: %s presents CA %s, which %s does not trust for it (it trusts %v)", ErrUnknownCA, cluster, short(ca), l.Name, shorts(p.CAs))
	}
	return fmt.Errorf("%w: %s is not a peer of %s", ErrUnknownPeer, cluster, l.Name)
}

// peer reports whether cluster is a configured peer.
func (l *Lab) peer(cluster string) bool {
	for _, p := range l.Peers {
		if p.Name == cluster {
			return true
		}
	}
	return false
}

// short abbreviates a fingerprint for messages.
func short(s string) string {
	if len(s) > 19 {
		return s[:16] + "..."
	}
	return s
}

func shorts(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = short(s)
	}
	return out
}
