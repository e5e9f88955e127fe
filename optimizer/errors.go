package optimizer

import (
	"errors"

	"pollux/optimizer/topology"
)

// Sentinel errors. Every error the package returns wraps one of these.
var (
	// ErrBadSnapshot is returned for a snapshot that cannot be allocated:
	// no GPUs, a placement naming an unknown node or with a non-positive
	// count, duplicate job or node IDs, min above max replicas.
	ErrBadSnapshot = errors.New("optimizer: bad snapshot")
	// ErrBadModel is returned when a job's goodput model is invalid or has
	// no feasible batch configuration at any share up to its fair share.
	ErrBadModel = errors.New("optimizer: bad job model")
	// ErrBadAssignment is returned by AssignGPUs when the previous GPU
	// assignment or the new allocation is inconsistent with the nodes.
	ErrBadAssignment = errors.New("optimizer: bad GPU assignment")
	// ErrNoOracle is returned by Optimus for a job without an Oracle.
	ErrNoOracle = errors.New("optimizer: job has no oracle")
	// ErrBadTopology is returned for topology levels, a node's declared
	// place in them or a job's topology constraint that cannot be read:
	// a level unknown, missing, repeated or out of order.
	ErrBadTopology = topology.ErrBadTopology
	// ErrUnsatisfiable is returned by CheckRequired for a job whose
	// required topology no domain of the cluster can hold.
	ErrUnsatisfiable = errors.New("optimizer: topology can never be met")
	// ErrForbidden is returned by CheckPlacement for nodes a job's GPU
	// type or required topology forbids.
	ErrForbidden = errors.New("optimizer: placement breaks the job's constraints")
	// ErrBadAutoscale is returned for unusable autoscaling settings: a
	// node template without GPUs, a minimum above the maximum, a utility
	// band outside (0, 1].
	ErrBadAutoscale = errors.New("optimizer: bad autoscaling settings")
	// ErrUnknownPolicy is returned by Lookup for a name it does not know.
	ErrUnknownPolicy = errors.New("optimizer: unknown policy")
)
