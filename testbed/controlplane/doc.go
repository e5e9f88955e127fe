// Package controlplane is the benchmark of the whole control plane in one
// process (`pollux bench controlplane`): three consensus servers (Raft
// over TCP on loopback with bolt logs, mutual TLS unless told otherwise)
// each with its allocator and job host, and hundreds of node actors whose
// emulated workers run as goroutines (package inproc). It times the
// leader's rounds from the tick to the last node's acknowledgement,
// counts the Raft writes and bytes they made and the reports the job
// actors took in, then kills the leader again and again and times each
// new leader's first round from its election. It is test equipment: only
// cmd/pollux depends on it.
package controlplane
