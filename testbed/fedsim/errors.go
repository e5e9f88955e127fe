package fedsim

import "errors"

// Sentinel errors; every error the package returns wraps one of them (or
// one of cluster/federation's, for a refused trust or lease).
var (
	// ErrBadFile is returned for a federation file that does not decode or
	// describes an unusable federation.
	ErrBadFile = errors.New("fedsim: bad federation file")
	// ErrWorkload is returned when a lab's workload cannot be built.
	ErrWorkload = errors.New("fedsim: lab workload")
	// ErrUnreachable is returned (and reported) for an injected command
	// or order sent to a lab that is down.
	ErrUnreachable = errors.New("fedsim: lab unreachable")
	// ErrInvariant is returned when the simulated federation breaks one of
	// its rules (a planned lease refused by a party, a borrower running on
	// GPUs it does not lease): a bug, never an expected outcome.
	ErrInvariant = errors.New("fedsim: federation invariant broken")
)
