// Package builtin holds the project's own parametric application profiles,
// so that the simulator runs with no measured traces at all. Each profile
// is a handful of numbers per application: the seven throughput-model
// parameters (the true step time on any placement), a log-linear curve of
// the pre-conditioned gradient noise scale over training progress, the
// progress one epoch makes and the number of epochs.
//
// profiles.json is derived from the artifact's traces by
//
//	go run ./testbed/builtin/gen --traces ../shared/pollux-artifact/traces > testbed/builtin/profiles.json
//
// It holds fitted parameters only, never a trace row.
package builtin
