// Package testbed defines what the trace-driven simulator replays: an
// Application is the ground truth of one deep-learning model (its true step
// times on every placement, its true gradient statistics over training and
// the progress at which each epoch ends), independent of where that truth
// comes from.
//
// Two sources implement it: package trace reads the measured traces of the
// Pollux artifact, package builtin holds parametric profiles the project
// derived itself so that the simulator runs without any measured data.
// Package workload reads and generates job arrival lists, and package sim
// replays a workload on a simulated cluster under any scheduling policy.
//
// The rest of testbed is test equipment for the real, multi-process
// system: the emulated GPU worker (emulator), the one cluster launcher
// (launch), fault injection judged by independent observers (chaos/...)
// and the failover benchmark (failover). The running system (consensus,
// cluster, optimizer, actors) never depends on any of it; a test asserts
// so.
package testbed
