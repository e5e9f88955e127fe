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
// Real jobs restart in seconds (Python and torch start in a few seconds,
// the replicas then meet and restore the checkpoint: 4-10 s per restart
// on the 2-core machine of docs/benchmarks.md). Each job's actor measures
// its own restart delay and the scheduler's restart penalty uses it; the
// servers weigh job ages on a faster clock (Options.TimeScale, default
// 20), which scales the measured delays alike (so it cancels out of the
// penalty) and makes the 30 s the penalty assumes before a job has
// measured one stand for 1.5 s of real time.
package realdemo
