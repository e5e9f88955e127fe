// Package linear checks that the API operations that promise
// linearizability behaved as if each took effect at one instant between
// its invoke and its completion, in one order consistent with real time,
// using porcupine (the checker of etcd's and MIT 6.824's Raft tests) over
// the client-side history alone (package history).
//
// The operations and their sequential specification, per job:
//   - submit: created (201) only if the job does not exist, then it does,
//     active; exists (409) only if it exists; unknown (timeout, 5xx) either;
//   - cancel: ok only if the job exists, then it is cancelled unless it had
//     already finished; 404 only if it does not exist; 409 only if it had
//     finished; unknown either;
//   - get job (every job of a linearizable list read, projected): absent
//     only if it does not exist; present only if it does, in a state
//     reachable from the last one (active may become completed or failed
//     on its own, cancelled only through a cancel; a finished job stays as
//     it is), with incarnation, epoch and progress never going backwards.
//
// and for the cluster: the allocation generation (and the Raft term) of a
// linearizable status read never goes backwards. Reads a follower answered
// from its local copy (stale) promise nothing and are left out. A
// partition that is not linearizable is written out with porcupine's
// visualisation (an HTML file).
package linear
