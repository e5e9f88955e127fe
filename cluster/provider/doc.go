// Package provider adds and removes the machines of an autoscaled
// cluster (issue 19). The leader's allocator decides the cluster's size
// (optimizer.Autoscaled), commits the decision with the names of the
// machines to add or drain (state.ScaleDecision), and only then asks
// a Provider: a machine is asked for by name, so a provider can make
// every call idempotent, and a failover never asks for one twice.
//
// Two providers exist: Local starts and stops `pollux agent` processes on
// this machine (the demo and tests), each with its own certificate from
// the cluster CA; Exec runs commands an operator supplies, with the
// node's name as the last argument, in the shape of Slurm's
// ResumeProgram/SuspendProgram and of cluster-autoscaler's external
// providers, under a timeout and with retries.
package provider
