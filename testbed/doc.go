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
// The commands that are not the running system are thin calls into
// testbed packages: simrun (pollux sim), tracefit (pollux fit), report
// (what sim shows and writes), demo and realdemo (pollux demo), fedlab
// and fedsim (federated labs, live and simulated), and the benchmarks
// allocbench, controlplane, failover and fedbench (pollux bench).
//
// The rest of testbed is test equipment for the real, multi-process
// system: the emulated GPU worker (emulator) and in-process workers
// (inproc), the one cluster launcher (launch), and fault injection judged
// by independent observers (chaos/suite runs pollux chaos; chaos/labloss
// and chaos/attack are its lab-loss and attack scenarios). The running
// system (consensus, cluster, optimizer, actors) never depends on any of
// it; testbed/boundary_test.go asserts so.
package testbed
