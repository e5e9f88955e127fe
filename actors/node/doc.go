// Package node is the node actor: one per agent machine, it runs the GPU
// workers the allocator assigns to the machine as OS processes.
//
// It receives the machine's whole desired state (pb.Assign) at an
// allocation generation, refuses a generation older than the newest it has
// seen (fencing a deposed leader), stops the workers no longer wanted
// (SIGTERM to the process group, SIGKILL after a grace period), and starts
// new job incarnations on free GPUs only: a GPU is handed to a worker only
// once the previous owner's processes have exited, so two jobs' workers
// never share one. Runs are keyed by (job, incarnation) and an incarnation
// is started at most once, so re-sent assignments are harmless.
//
// Workers report to a TCP listener of the node (docs/worker-protocol.md);
// the node checks each report against the incarnation it runs and forwards
// it, with every worker exit, to the run's owner actor.
//
// Workers are started with Pdeathsig SIGKILL: if the agent dies, its
// workers die with it and cannot keep GPUs as orphans.
package node
