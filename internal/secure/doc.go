// Package secure is the transport security of a server or an agent
// process: it loads the certificate, CA and gossip keys its flags name
// and secures the process's channels with them (the actor transport's
// gRPC, TLS listeners, gossip keys re-read on SIGHUP).
//
// It exists so that the server and agent assemble their channels from
// one set of checks (role, name and hosts of the certificate, the
// insecure switch) instead of two copies. docs/security.md describes
// the channels.
package secure
