// Package demo runs the demos of `pollux demo` on this machine, each a
// whole cluster of processes (package launch) that it stops on every way
// out: the emulated demo (a dozen jobs of emulated GPU workers, and with
// UI the dashboard kept up), the autoscaling demo (the servers add and
// remove agents), the federation demo (three labs lending each other
// idle GPUs, package fedlab) and the real demo's result (package
// realdemo).
package demo
