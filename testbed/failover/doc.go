// Package failover is the leader-kill benchmark of the replicated state
// (`pollux bench failover`): it starts consensus servers as separate
// processes (TCP transport, bolt log and file snapshots), measures how many
// allocations per second the leader commits, then kills the leader again
// and again and times, from each kill, the next write that commits through
// a new leader. Member is the server process it starts (the hidden `pollux
// consensus-member` command): a consensus server with an HTTP listener for
// forwarded writes and the benchmark's requests.
package failover
