// Package check judges a fault-injection run from its independent
// observers only: the harness's client-side history of API operations
// and of what it did and saw (package history), and the records each
// worker process wrote itself (package record). Nothing comes from the
// system's own event log.
//
// It derives:
//   - the outcome of every job the harness tried to submit: completed,
//     failed (with the reason), cancelled, lost (acknowledged, never seen
//     finished) or unsubmitted (never acknowledged nor seen to exist);
//   - the violations of the invariants (gpu-exclusive, worker-ended,
//     stale-checkpoint, lost-progress, completion-backed, ran-after-finish,
//     exists-before-submit) and the linearizability of the API (package
//     linear);
//   - the run's figures: faults planned and injected, by kind, failover
//     and re-placement times, and the faults after which either was never
//     observed.
//
// A history that is empty, truncated (no run_end), or whose operations do
// not pair up is an error, not a pass.
package check
