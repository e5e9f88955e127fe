// Package fedlab starts the labs of a federation on this machine, each a
// whole cluster of its own (package launch) with its own CA and a
// federation file naming the others as peers, and reads what the labs'
// processes logged. `pollux demo --federation`, the lab-loss chaos
// scenario and the federation tests start their labs with it.
package fedlab
