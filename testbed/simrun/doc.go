// Package simrun is what `pollux sim` runs: it resolves the cluster, the
// traces and the workloads an invocation names, replays every (policy,
// workload) pair on the simulator (package sim), several at once, and
// reports the comparison (package report) as a table, one JSON object
// and, with an output directory, files and plots. Run compares policies
// on a fixed cluster, Cloud autoscaling policies on an elastic cluster,
// and Federation federated labs (package fedsim). The caller chooses the
// policies by name and builds them; errors caused by the options are
// marked as bad input (package internal/usage).
package simrun
