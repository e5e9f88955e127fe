package history

import "errors"

// Sentinel errors; every error this package returns wraps one of them.
var (
	// ErrMalformed is returned by Decode and Validate for a line or event
	// that is not a valid event: bad JSON, an unknown field or kind, a
	// field the kind requires missing or one it does not use set, a value
	// out of range, an over-long or torn line.
	ErrMalformed = errors.New("history: malformed event")
	// ErrTooLong is returned by Encode and Recorder.Record for an event
	// whose encoding would exceed MaxLine bytes.
	ErrTooLong = errors.New("history: event too long")
	// ErrEnv is returned by FromEnv when the environment names a history
	// file but its epoch is missing or not a number.
	ErrEnv = errors.New("history: bad environment")
)
