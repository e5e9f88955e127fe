// Package failover is the leader-kill benchmark of the replicated state
// (`pollux bench failover`): it starts consensus servers as separate
// processes (TCP transport with mutual TLS, bolt log and file snapshots),
// measures how many allocations per second the leader commits, then kills
// the leader again and again and times, from each kill, the next write
// that commits through a new leader. Unless told otherwise it then runs
// the same benchmark in plaintext and reports the cost of TLS beside it.
// RunMember is the server process it starts (the hidden `pollux
// consensus-member` command): a consensus server whose Raft port also
// carries forwarded writes, with an HTTPS listener for the benchmark's
// requests.
package failover
