package goodput

import "errors"

// Sentinel errors. Every error the package returns wraps one of these, so
// callers can test with errors.Is.
var (
	// ErrNoPoints is returned by Fit when it is given no profile points.
	ErrNoPoints = errors.New("goodput: no profile points")
	// ErrBadPoint is returned for a profile point with a non-positive or
	// non-finite time, a non-positive batch, or K < N.
	ErrBadPoint = errors.New("goodput: bad profile point")
	// ErrBadParams is returned for throughput parameters that are not
	// finite and positive, or a gamma outside [1, 10].
	ErrBadParams = errors.New("goodput: bad throughput parameters")
	// ErrBadPlacement is returned for N < 1, K < N or similar.
	ErrBadPlacement = errors.New("goodput: bad placement")
	// ErrBadLimits is returned for batch-size limits that are inconsistent
	// (non-positive, min above max).
	ErrBadLimits = errors.New("goodput: bad batch-size limits")
	// ErrNoConfig is returned when the batch limits admit no configuration
	// on the asked placement.
	ErrNoConfig = errors.New("goodput: no feasible batch configuration")
)
