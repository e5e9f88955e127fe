// Package member is what a server and an agent do alike as members of
// their cluster's gossip: the place they advertise (topology and GPU
// type, from their flags), joining until a seed answers, and logging
// membership changes.
//
// It exists so that the server and agent packages share these steps
// rather than one importing the other.
package member
