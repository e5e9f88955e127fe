// Package api is the HTTP JSON API every server answers: job submission
// (the YAML of package jobspec), listings of jobs and nodes, the cluster
// status, Prometheus metrics, and the consensus forwarding endpoint.
//
// Writes go through consensus, which forwards a follower's write to the
// leader; reads answer from the leader's linearizable state, or on a
// follower from its local (possibly slightly stale) copy, flagged as such.
package api
