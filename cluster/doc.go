// Package cluster is membership and failure detection for the control
// plane: every server and agent runs one Membership (a hashicorp/memberlist
// gossip member) that advertises its Meta (role, rack and topology, GPU
// type, GPUs, the cluster's topology levels (servers), actor and Raft
// addresses) and delivers join, update and leave events without ever
// blocking the gossip machinery.
//
// Peers' metadata arrives from the network and is decoded strictly
// (DecodeMeta); a member whose metadata does not decode is logged and left
// out of events and of Members.
//
// A crowded member (Config.Crowded: hundreds in one process, as in the
// control-plane bench) uses a transport of this package that receives
// each gossip packet into one reused buffer; every other member uses
// memberlist's own.
package cluster
