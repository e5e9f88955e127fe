// Package server assembles and runs one control-plane server: a Raft
// member of the replicated scheduler state, a gossip member, the
// allocator actor, a job host, the HTTP API and dashboard (packages api
// and dashboard below), and, in a federation, the link to the peer labs.
//
// It also holds the control-plane loops a server runs beside its actors:
// setting the cluster's configuration once (initCluster), advertising
// and checking the topology levels (watchLevels), naming the lab
// (setLab) and warning when one rack holds a majority of the voters
// (warnRackMajority). `pollux server` maps its flags to a Config and
// calls Run; tests start servers in process the same way.
package server
