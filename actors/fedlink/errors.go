package fedlink

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrBadFile is returned for a federation file that cannot be used.
	ErrBadFile = errors.New("fedlink: bad federation file")
	// ErrBadMessage is returned for a message from a peer that does not
	// decode or is malformed.
	ErrBadMessage = errors.New("fedlink: malformed message")
	// ErrRefused is returned when a peer refused a message (its ledger
	// refused a lease command, or it does not trust this cluster).
	ErrRefused = errors.New("fedlink: refused by the peer")
	// ErrUnreachable is returned when no address of a peer answered.
	ErrUnreachable = errors.New("fedlink: peer unreachable")
	// ErrStaleOrder is returned for a borrower's order older (by its
	// cluster's term and generation) than one already accepted.
	ErrStaleOrder = errors.New("fedlink: stale order")
	// ErrConfig is returned for an unusable link configuration.
	ErrConfig = errors.New("fedlink: bad configuration")
)
