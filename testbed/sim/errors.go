package sim

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrBadConfig is returned for an unusable cluster or run configuration.
	ErrBadConfig = errors.New("sim: bad configuration")
	// ErrUnknownApp is returned for a job whose application is not in the
	// catalog.
	ErrUnknownApp = errors.New("sim: unknown application")
	// ErrPolicy is returned when the policy fails or returns an allocation
	// the cluster cannot hold.
	ErrPolicy = errors.New("sim: policy failure")
	// ErrHorizon is returned when jobs are still running at the time limit.
	ErrHorizon = errors.New("sim: time limit reached")
)
