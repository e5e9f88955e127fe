package workerproto

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrBadReport is returned for a report line that is not one JSON
	// object of the documented fields with valid values.
	ErrBadReport = errors.New("workerproto: bad report")
	// ErrLineTooLong is returned by Reader for a line longer than
	// MaxLineBytes.
	ErrLineTooLong = errors.New("workerproto: report line too long")
	// ErrBadEnv is returned by ParseEnv for a missing or malformed
	// environment variable.
	ErrBadEnv = errors.New("workerproto: bad worker environment")
)
