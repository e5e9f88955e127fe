// Package labloss is the lab-loss chaos scenario (`pollux chaos
// --scenario lab-loss`): three federated labs on this machine, one of
// which lends a node to one peer and borrows one of the other, then loses
// every process at once (servers, agents, the workers on its agents)
// while both peers hold leases with it. It judges the run from outside
// the labs: the peers' ledgers (the leases with the lost lab gone within
// their time to live and a bounded bookkeeping delay), the labs' APIs
// (every job completes) and the workers' own records (the jobs that ran
// on the lost lab resume from their checkpoints, no worker on a GPU its
// lab did not lease then, no restore behind a written checkpoint).
package labloss
