package trace

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrNoTraces is returned when a trace directory is missing or holds
	// no application.
	ErrNoTraces = errors.New("trace: no traces")
	// ErrMalformed is returned for a trace file that cannot be decoded:
	// wrong header, wrong column count, a non-numeric or out-of-range value.
	ErrMalformed = errors.New("trace: malformed trace file")
)
