// Package api is the HTTP JSON API every server answers: job submission
// (the YAML of package jobspec), listings of jobs and nodes, one job with
// its actor's bid, cancellation, the cluster status, the Raft membership
// (operator raft: list, add and remove servers) and Prometheus metrics.
// The servers serve it over HTTPS; every request body is capped (MaxBody,
// a job spec jobspec.MaxBytes).
//
// Writes go through consensus, which forwards a follower's write to the
// leader over the Raft port (not through this API); Raft membership
// changes are redirected to the leader's API (a 307 the client follows).
// Reads answer from the leader's linearizable state, or on a follower
// from its local (possibly slightly stale) copy, flagged as such in the
// X-Pollux-Stale header. A removal that would leave the cluster without
// a live quorum is refused with the reason.
package api
