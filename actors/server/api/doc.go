// Package api is the HTTP JSON API every server answers: job submission
// (the YAML of package jobspec), listings of jobs and nodes, one job with
// its actor's bid, cancellation, the cluster status, the Raft membership
// (operator raft: list, add and remove servers) and Prometheus metrics.
// The servers serve it over HTTPS; every request body is capped (MaxBody,
// a job spec jobspec.MaxBytes).
//
// Every endpoint but the bootstrap needs an API token (Authorization:
// Bearer SECRET) of a role that allows it: reads need read, submitting
// and cancelling submit (a submit token cancels only the jobs it
// submitted), the operator and token endpoints admin. A missing,
// malformed, unknown or revoked token is a 401, a role too low a 403;
// either is one WARN log line naming the peer, and nothing is written.
// Each server checks tokens against its own copy of the replicated token
// table (package consensus), and the writes carry the token's accessor
// so that the state machine checks them again in log order. The
// bootstrap (POST PathACLBootstrap) makes the first admin token once in
// the cluster's life and needs a client certificate of the cluster CA.
// Config.Insecure (pollux server --insecure) turns the check off.
//
// Writes go through consensus, which forwards a follower's write to the
// leader over the Raft port (not through this API); Raft membership
// changes are redirected to the leader's API (a 307 the client follows).
// Reads answer from the leader's linearizable state, or on a follower
// from its local (possibly slightly stale) copy, flagged as such in the
// X-Pollux-Stale header. A removal that would leave the cluster without
// a live quorum is refused with the reason.
package api
