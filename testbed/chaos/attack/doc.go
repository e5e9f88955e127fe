// Package attack is `pollux chaos --scenario attack`: it starts a secure
// cluster (mutual TLS, gossip keys, report tokens, the agents' command
// policy) and attacks it from outside, then checks that a normal job
// still completes.
//
// Each attack is one thing an outsider, a stolen credential of the wrong
// kind, a job submitter or a compromised worker might try: plaintext and
// wrong certificates on every port, API requests without a token or with
// a token of a role too low or revoked, forged Assign, forged gossip
// members, forbidden commands and checkpoint directories, reports without
// their rank's token or done reports from another rank, oversized bodies
// and slow clients; and a peer lab's, on two federated labs of their
// own (federation.go). An attack counts as refused only if the refusal is seen
// where it should be (the client's error, the refusing process's log
// line naming the peer) and an observer outside the attacked code paths
// sees no change: the replicated state through every server's read API
// (jobs with their states and incarnations, nodes, Raft peers, API
// tokens; an election is noted, not counted: a loaded machine delays
// heartbeats), the process table (every server and agent alive, no
// worker of a refused job) and the file system (no file an attack would
// create).
// The result is the JSON issue 12 names:
// {"attacks":N,"refused":N,"succeeded":0,"cases":{"NAME":{"refused":true,"how":"..."}}}.
//
// Attacks are a table (attacks.go).
package attack
