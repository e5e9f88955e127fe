// Package pki is the cluster's public-key infrastructure: one cluster CA,
// certificates that name their holder's role (server, agent or client)
// and name, and the TLS configurations of every channel, which check
// that the peer holds a certificate of the cluster CA and of a role that
// may use the channel.
//
// Why a package of its own: who may talk to whom is a policy, and a
// policy spread over every listener drifts. Here it is one table
// (acceptFrom) and the builders every listener and dialer take their
// configuration from; the wiring elsewhere only says which channel a
// socket is.
//
// Certificates are ECDSA P-256, PEM files, with the identity in a URI
// subject alternative name spiffe://pollux/<role>/<name> (and repeated in
// the subject: CN is the name, OU the role), plus the IP addresses and
// DNS names the holder serves on. A cluster of a federation names itself
// in the trust domain, spiffe://<cluster>/<role>/<name>: the federation
// channel between clusters checks a peer against the CA of the cluster
// its certificate claims (FederationServerConfig, FederationPeer), since
// every cluster has its own CA. Only the standard library's crypto is
// used.
//
// Listener completes every TLS handshake in its own goroutine, bounded in
// time, and logs each refusal once with the peer's address and the
// identity its certificate claimed, so a refused peer never reaches the
// code behind the socket. Before the handshake, a Gate admits the
// connection: a cap on the handshakes in progress per source address and
// in total, and room of its own for the cluster's members (AddrSet), so
// an anonymous flood from a few addresses keeps nobody else out; the
// actor channel's gRPC listener goes through the same gate.
package pki
