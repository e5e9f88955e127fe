package federation

import (
	"maps"
	"slices"
	"strings"
)

// BorrowedID is the node id under which a borrower's allocator sees the
// GPUs it leases of a lender's node: "<lender>/<node>" (a lab name has
// no "/", so the id splits back without ambiguity).
func BorrowedID(lender, node string) string { return lender + "/" + node }

// SplitBorrowed splits a BorrowedID into its lender and node; ok is
// false for an id that is not one.
func SplitBorrowed(id string) (lender, node string, ok bool) {
	lender, node, ok = strings.Cut(id, "/")
	if !ok || !ValidName(lender) || !ValidName(node) {
		return "", "", false
	}
	return lender, node, true
}

// BorrowedNodes are the GPUs the lab borrows on each lender's node
// (keyed by BorrowedID) in the leases that are still in force after
// until: a borrower places jobs only on leases that do not expire
// before the round's work is done (docs/federation.md: a borrower stops
// ordering one interval before expiry). Sorted iteration is the
// caller's (BorrowedIDs).
func (lg *Ledger) BorrowedNodes(until float64) map[string]int {
	out := map[string]int{}
	for _, l := range lg.leases {
		if l.Borrower != lg.self.Name || l.Expires <= until {
			continue
		}
		for _, n := range l.Nodes {
			out[BorrowedID(l.Lender, n.Node)] += n.GPUs
		}
	}
	return out
}

// BorrowedIDs are the keys of BorrowedNodes(until), sorted.
func (lg *Ledger) BorrowedIDs(until float64) []string {
	return slices.Sorted(maps.Keys(lg.BorrowedNodes(until)))
}
