// Package realdemo runs real training jobs on a whole local cluster: the
// driver of `pollux demo --real`. It installs the PyTorch worker library
// (package actors/node/worker) into the run directory, starts servers and
// agents offering CPU slots through the one launcher (testbed/launch:
// mutual TLS, encrypted gossip), submits the example digits models at
// staggered times, follows them through the API until every one has
// completed, and reports per job what its checkpoint says: the accuracy
// reached, and the replicas and batch size of every incarnation that
// trained (pollux-progress.json's run history).
//
// Real jobs restart in seconds (Python and torch start in about 1 s on
// an idle machine, the replicas then meet and restore the checkpoint),
// while the scheduler's restart penalty charges 30 s of its clock per
// restart, as for jobs of hours on GPUs. So the servers weigh job ages on
// a faster clock (Options.TimeScale, default 20): the penalty then stands
// for 1.5 s of real time, and jobs of a minute or two are resized as
// Pollux resizes jobs of hours.
package realdemo
