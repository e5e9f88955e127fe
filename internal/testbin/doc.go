// Package testbin builds the pollux binary for tests that run it as
// processes of their own: a cluster of servers and agents, a chaos run,
// the control-plane bench with its node process. A test binary outside
// cmd/pollux cannot run itself as pollux, and one built here also runs
// without the race detector, under which protoactor's remote races with
// a second remote in the same process.
package testbin
