// Package node is the node actor: one per agent machine, it runs the GPU
// workers the leader assigns to the machine (as OS processes, or through
// another Launcher).
//
// It receives the machine's whole desired state (pb.Assign) every round,
// fenced by the sender's Raft term and the allocation generation: an
// assignment older than the newest it accepted is refused, so a deposed
// leader cannot start or stop anything. Its fencing state (cluster id,
// term, generation, the newest incarnation of every job it was assigned)
// is written to its data directory atomically before a new incarnation
// starts, so a restarted agent never runs an incarnation twice; an
// assignment of another cluster id (a rebuilt Raft cluster) resets it,
// with a loud log line. It stops the workers no longer wanted (SIGTERM to
// the process group, SIGKILL after a grace period) and starts new job
// incarnations on free GPUs only: a GPU is handed to a worker only once
// the previous owner's processes have exited, so two jobs' workers never
// share one.
//
// Every answer (pb.AssignAck) tells what the node really runs: each run's
// GPUs, live workers, how the finished ones ended, whether rank 0
// reported done, and the assigned incarnations it refuses because it ran
// them already. The leader reconciles from it.
//
// It runs only what its policy allows (policy.go, checkpoint.go): a
// command or emulated application of its allow-list, with a checkpoint
// directory below the cluster's checkpoint root (created for the workers,
// never through a link leading out of the root), as the RunAs user, with
// only the protocol's variables and Config.WorkerEnv. A run the policy
// forbids is denied in the ack, with the reason, and never started.
//
// Workers report to a TCP listener of the node (docs/worker-protocol.md);
// the node checks each report (auth.go) against the runs it has and the
// report token of the report's rank, which the leader sent with the
// assignment, lets only rank 0 of a current run say done, queues it for
// the actor (reportqueue.go: one wake-up for all the reports that arrive
// before the actor takes them), and forwards it to the run's owner (its
// job actor), gathered per owner for ReportFlush (a done report at once,
// with its token for the leader to check), and tells the owner of every
// worker exit. The listener (reports.go) keeps a
// connection that has not delivered an accepted report on probation: a
// short deadline, closed at its first bad line, first to go at the
// connection cap.
//
// It runs workers only while it holds a lease from the leader's
// allocator (lease.go, pb.LeaseRenew): without one it starts nothing;
// when its lease lapses (the leader is unreachable) it pauses its
// workers with SIGSTOP, so that a node cut off from the control plane
// writes no checkpoint while the majority re-places its jobs, and the
// next renewal resumes them, or the next assignment kills them (never
// SIGTERM, on which a worker checkpoints) if they have been superseded.
//
// Workers are started with Pdeathsig SIGKILL: if the agent dies, its
// workers die with it and cannot keep GPUs as orphans.
package node
