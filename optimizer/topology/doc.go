// Package topology reads and checks the names of a cluster's network
// topology: its levels (innermost the rack: "rack,zone"), a node's
// domain at every level ("rack=r3,zone=z1") and the names of levels,
// domains and GPU types.
//
// It is a leaf (standard library only) so that the packages that only
// check names (cluster membership, job specs, the replicated state) need
// not import the optimizer, which places jobs on that topology.
package topology
