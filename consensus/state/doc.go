// Package state is the replicated scheduler state as a pure, deterministic
// state machine: the types (cluster configuration, jobs, nodes, the
// committed allocation, API tokens, autoscaler and federation state), the
// commands that change them, their binary encoding, and ApplyTo.
//
// It imports no Raft: package consensus replicates it with hashicorp/raft,
// and tools and tests apply commands to a State of their own. Apply reads
// no clock and no randomness and checks a whole command before changing
// anything, so a refused command leaves no trace and every replica that
// applies the same log holds the same state, byte for byte (snapshots of
// equal states are identical).
//
// docs/replicated-state.md gives the semantics of each command (fencing
// by term and generation, partial rounds, exactly-once measurements,
// incarnations), the encoding and the history of snapshot versions.
package state
