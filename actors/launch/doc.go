// Package launch starts a whole Pollux cluster on one machine: servers and
// agents as separate OS processes on 127.0.0.1 (agents running emulated
// workers), waits until every server sees every agent, and stops every
// process it started, also when its caller is interrupted. It is what
// the multi-process tests, a demo and a fault-injection harness drive; it
// talks to the cluster only through the processes' command lines and the
// HTTP API, as a user would. Its tests are cmd/pollux's multi-process
// tests, which have a pollux binary to run.
package launch
