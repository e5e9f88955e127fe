// Package driver runs fault-injection scenarios end to end: it starts a
// multi-process cluster on 127.0.0.1 (servers, node agents, emulated
// workers) with every process recording into one history, submits a
// workload of emulated jobs, injects a seeded fault schedule (kill -9,
// SIGSTOP/SIGCONT, restarts from the same data directory or with the same
// agent id), waits for the cluster to converge, stops everything and
// checks the history with testbed/chaos/check.
//
// It manages processes itself, on top of testbed/chaos/proc, rather than
// through actors/launch, because faults need what launch does not offer:
// fixed ports so that a killed server or agent restarts at the same
// addresses, pause and resume, and a history event for every start, exit
// and signal.
package driver
