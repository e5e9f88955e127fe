package main

import (
	"github.com/spf13/pflag"

	"pollux/internal/secure"
)

// securityFlags are the transport-security flags of servers and agents.
func securityFlags(f *pflag.FlagSet, o *secure.Options) {
	f.StringVar(&o.CA, "ca", "", "cluster CA certificate (pollux tls ca create)")
	f.StringVar(&o.Cert, "cert", "", "this process's certificate (pollux tls cert create)")
	f.StringVar(&o.Key, "key", "", "this process's certificate key")
	f.StringVar(&o.GossipKey, "gossip-key", "", "gossip key file (pollux keygen; one key per line, the first encrypts; re-read on SIGHUP)")
	f.BoolVar(&o.Insecure, "insecure", false, "run without TLS (plaintext Raft, actors, API and reports): development only")
}
