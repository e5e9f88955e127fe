// Package history is the event log of a fault-injection run: every server,
// agent and worker of a cluster under test, and the harness that drives it,
// appends what it did (process starts and exits, signals, worker starts and
// stops with their GPUs, committed allocations, acknowledged submissions,
// completions, accepted worker reports) to one shared file, and the
// invariant checker (package check) reconstructs from it who held which
// GPU when.
//
// The file is JSON lines: one Event per line, written with a single write
// to a file opened with O_APPEND, so that concurrent writers in different
// processes never interleave their lines. Timestamps are nanoseconds since
// a shared epoch on CLOCK_MONOTONIC, the one clock every process on the
// machine reads alike (see Monotonic); the harness picks the epoch and hands
// it to its children in the environment (EnvEpoch, EnvFile).
//
// Decode reads such a file back, strictly: an unknown field, a missing
// field an event kind requires, a value out of range or a torn last line is
// an error naming the file and line.
package history
