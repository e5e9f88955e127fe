// Package workerlog keeps each worker's stdout and stderr in a file of
// its own on its agent (per job, incarnation and rank), size-capped by
// rotation, and serves it to the servers' API through the agent's logs
// actor: one job's workers never see another's output, a chatty worker
// cannot fill the disk, and an earlier incarnation's log stays readable
// after a resize. docs/logs.md describes the policy.
package workerlog
