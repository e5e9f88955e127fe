// Package driver runs the fault-injection scenarios end to end: for a
// scenario and a seed it starts a cluster with the observers on (package
// launch), submits a seeded workload, cancels a seeded part of it (and a
// job never submitted) and reads those jobs back, reads the jobs and the
// status all along, injects the scenario's faults on their schedule (kills, pauses,
// restarts; with network namespaces partitions, loss and delay), sends a
// probe job after every fault that takes the leader away, waits until
// every acknowledged job has finished, stops everything, and judges the
// run from the observers' records alone (package check). Summary folds
// several runs into the figures `pollux chaos` prints.
package driver
