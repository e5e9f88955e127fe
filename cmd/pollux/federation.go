package main

import (
	"github.com/spf13/pflag"

	"pollux/actors/fedlink"
	"pollux/actors/server"
)

// federationFlags are the federation flags of `pollux server`
// (docs/federation.md).
func federationFlags(f *pflag.FlagSet, o *server.Federation) {
	f.StringVar(&o.Cluster, "cluster", "", "this cluster's name (1-63 characters of [A-Za-z0-9._-]): written once into the replicated state; "+
		"a server started later with another name refuses to run. Required with --federation")
	f.StringVar(&o.File, "federation", "", "federation file: the lab's quota and its peer clusters (name, federation addresses, CA bundle "+
		"file), docs/federation.md; the server's certificate must name --cluster (pollux tls cert create --cluster)")
	f.StringVar(&o.Addr, "federation-addr", "", "address (host:port) of the federation listener, where peer clusters' servers "+
		"reach this one over mutual TLS (required with --federation)")
	f.DurationVar(&o.Interval, "federation-interval", fedlink.DefaultInterval, "how often the leader exchanges bids with the peers "+
		"and plans leases; a peer is noticed lost after two to three of them")
	f.StringVar(&o.GossipKey, "federation-gossip-key", "", "key file of the federation's gossip pool (pollux keygen; shared by the "+
		"federation, distinct from the lab's --gossip-key): every server joins the pool, where labs find each other's servers and "+
		"notice a lost lab within seconds (without it, only the bid exchange notices)")
	f.IntVar(&o.GossipPort, "federation-gossip-port", 0, "port of the federation's gossip pool (0: any free port; peers list it as "+
		"\"gossip\" in their federation files)")
}
