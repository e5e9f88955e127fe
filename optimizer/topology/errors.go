package topology

import "errors"

// Sentinel errors. Every error the package returns wraps one of these.
var (
	// ErrBadTopology is returned for topology levels, a node's declared
	// place in them or a name that cannot be read: a level unknown,
	// missing, repeated or out of order, a name with characters outside
	// the allowed set. Its message keeps the "optimizer:" prefix it had
	// when these functions lived in package optimizer (operators and
	// tests match it); optimizer.ErrBadTopology is the same value.
	ErrBadTopology = errors.New("optimizer: bad topology")
)
