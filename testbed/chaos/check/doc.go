// Package check verifies a fault-injection run from its history (package
// history): every acknowledged submission completes exactly once, no GPU
// ever runs two workers at the same instant (a worker holds its GPUs
// until a recorder saw it gone, whatever happened to its agent), no
// report from an old incarnation is accepted into a newer one, committed
// allocation generations only go forward and are never reused, and the
// cluster converges within a bound after the last fault. Each breach is a
// typed, human-readable Violation carrying the events that prove it.
//
// Measure derives the run's figures from the same history: faults
// injected, jobs submitted and completed, leader failover times and the
// time to re-place a dead agent's jobs.
package check
