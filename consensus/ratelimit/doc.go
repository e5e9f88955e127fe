// Package ratelimit holds the submitters' token buckets of a Raft
// leader: every write reaches the log through the leader, so a bucket
// kept there bounds a submitter's rate over the whole cluster, whichever
// server it talks to. The buckets are not replicated: a new leader
// starts them full (docs/security.md, Tenants).
package ratelimit
