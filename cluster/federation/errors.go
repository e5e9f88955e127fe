package federation

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrBadConfig is returned for an unusable lab or federation
	// description (names, nodes, quotas, peers).
	ErrBadConfig = errors.New("federation: bad configuration")
	// ErrUnknownPeer is returned for a message from, or a lease with, a
	// cluster that is not a configured peer.
	ErrUnknownPeer = errors.New("federation: unknown peer cluster")
	// ErrUnknownCA is returned when a peer presents a CA other than the
	// one it is trusted with.
	ErrUnknownCA = errors.New("federation: peer's CA is not trusted")
	// ErrBadCommand is returned for a lease command that does not decode
	// or is malformed (missing fields, bad numbers).
	ErrBadCommand = errors.New("federation: malformed lease command")
	// ErrNotParty is returned for a command that the issuing cluster may
	// not issue, or that concerns a lease this cluster is no party to.
	ErrNotParty = errors.New("federation: not a party to the lease")
	// ErrNotOwner is returned for a lease of nodes (or GPUs) the lender
	// does not own.
	ErrNotOwner = errors.New("federation: lender does not own the GPUs")
	// ErrNodeLeased is returned for a lease of GPUs already leased out.
	ErrNodeLeased = errors.New("federation: GPUs already leased")
	// ErrLendingLimit is returned for a lease beyond the lender's lending
	// limit.
	ErrLendingLimit = errors.New("federation: beyond the lending limit")
	// ErrBorrowingLimit is returned for a lease beyond the borrower's
	// borrowing limit.
	ErrBorrowingLimit = errors.New("federation: beyond the borrowing limit")
	// ErrLeaseExists is returned for a grant whose lease ID is in use (or
	// was used by a lease that ended).
	ErrLeaseExists = errors.New("federation: lease ID already used")
	// ErrUnknownLease is returned for a command on a lease that does not
	// exist.
	ErrUnknownLease = errors.New("federation: unknown lease")
	// ErrExpired is returned for a renewal (or any command) of a lease
	// whose time to live has run out.
	ErrExpired = errors.New("federation: lease expired")
	// ErrNotLeased is returned for a borrower's order for GPUs it does not
	// lease.
	ErrNotLeased = errors.New("federation: GPUs not leased to the borrower")
)
