// Package client is a Go client of the HTTP API every pollux server
// answers (package api): submit, list and cancel jobs, read the nodes and
// the cluster status, manage API tokens and the Raft membership. The
// pollux CLI is built on it, and other tools can import it.
//
// Why a package of its own: the CLI's commands were each a request, a
// retry loop and a table; with the requests here the commands only print,
// and a tool that drives a cluster gets the same failover, TLS checks and
// error hints as the CLI.
//
// A Client tries its servers in order: an unreachable server or a 5xx
// answer moves on to the next, a 4xx answer (APIError) is final, since
// every server would refuse the request the same way. Since a write
// whose answer was lost may have committed, Submit and Cancel send one
// random idempotency key (api.HeaderIdempotencyKey) to every server they
// try: a retry of a write that committed answers as the write did,
// rather than "already exists" or "is cancelled". It speaks HTTPS,
// checking that the server holds a server certificate of the cluster CA
// (Config.CA), unless a server's address says http://; it sends the API
// token as a bearer token, also after a redirect to the leader's API (Raft
// membership changes are redirected there). The request and answer types
// are package api's own.
package client
