package cluster

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrBadMeta is returned for node metadata that does not decode or
	// validate, or does not fit the gossip limit.
	ErrBadMeta = errors.New("cluster: bad node metadata")
	// ErrConfig is returned by Start for an unusable configuration.
	ErrConfig = errors.New("cluster: bad configuration")
	// ErrJoin is returned when no join address could be reached.
	ErrJoin = errors.New("cluster: join failed")
)
