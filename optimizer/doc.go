// Package optimizer holds the cluster-wide scheduling policies: Pollux's
// goodput-driven search and the Tiresias and Optimus baselines, and for
// clusters of several GPU types Sia, Pollux blind to types and our
// heterogeneity-aware Pollux, all behind one small Policy interface, plus
// the pieces around them.
//
// Every policy is pure: it reads an immutable Snapshot (jobs with their
// goodput models, age, attained service, restarts, replica bounds and
// current placements; nodes; a seed; the current time) and the search
// State it returned the round before, and returns a Result: one Placement
// (per-node replica counts) per job, diagnostics and the next State. There
// is no I/O, no clock and no global randomness (math/rand/v2 PCG streams
// derived from Snapshot.Seed), so the same snapshot and state give the same
// allocation whatever the number of worker goroutines. The live allocator
// actor and the trace-driven testbed call the very same code.
//
// Contents:
//   - Lookup and Names (registry.go): every policy by the name the
//     commands take, built with Options; what a caller needs beyond
//     Policy is an optional interface (Budgeted, TypeAware, Sizer;
//     policy.go). docs/policies.md lists them.
//   - Objective (objective.go): the Pollux fitness of pollux-spec.md
//     section 4, speedups relative to the fair share, exactly as the Python
//     artifact computes it (checked against its recorded rounds by
//     optimizer/refsnap's tests).
//   - Pollux (pollux.go, search.go, climb.go): a genetic search over sparse
//     per-job placements with the spec's crossover, mutations and repair,
//     warm-started from the previous population, plus a hill climber.
//   - RefGA (refga.go) and Greedy (greedy.go): the reference-shaped dense
//     GA and a greedy baseline, used by the tests and `pollux bench
//     allocator` to measure the search's quality.
//   - Tiresias and Optimus (baselines.go): pollux-spec.md section 5.
//   - AssignGPUs (gpus.go): per-node counts to GPU ids without moving jobs
//     whose counts did not change.
//   - Synthetic (synth.go): seeded synthetic rounds for benchmarks and tests.
//   - GPU types: a Node has a Type, a Job a model per type (TypeModels)
//     and its one-GPU throughput per type (to project a model to a type it
//     has not run on). Sia (sia.go) is Sia's policy as its artifact runs
//     it; PolluxUnaware (unaware.go) is Pollux on a virtual cluster of
//     equal nodes, keeping one type per job; HetPollux (hetpollux.go) is
//     ours. Sia and HetPollux solve a multiple-choice knapsack per round
//     (choice.go): exactly by dynamic programming while the per-type GPU
//     budgets are small, by Lagrangian relaxation beyond.
//   - Topology (topology.go; the names in optimizer/topology): a Node
//     has its domain at every level of the cluster's topology
//     (Snapshot.Levels, innermost the rack; a node that declares nothing
//     is in the default rack), a Job may require or prefer one domain of
//     a level (TopologyConstraint: Kueue's and Volcano's hard and soft
//     network topology). The objective prices a
//     placement across racks with the cross-rack term the job fitted on
//     its own measurements across racks (none: racks are free; no policy
//     is told the network's cost); the mutation draws a
//     job's new nodes mostly from its own rack, the climber grows jobs
//     within their racks first and tries to pull a job spread over racks
//     into one, repair keeps a required job within one domain, and a
//     preferred job is kept within one domain whenever one holds it. Every
//     policy honours required (the ones blind to topology hold such a job
//     back rather than spread it). On a cluster of one rack none of this
//     runs: allocations are bit-identical to the rack-blind search.
//   - Search rack by rack (hier.go): on large clusters of many racks,
//     Pollux splits the round into groups of racks, one small genetic
//     search each (in parallel), merged and hill-climbed over the whole
//     cluster: faster than the flat search and fitter on the same rounds.
//   - Cluster autoscaling (autoscale.go, hetautoscale.go,
//     thrautoscale.go): in the cloud the cluster size is a decision too.
//     Autoscaled wraps a Sizer (Pollux on one GPU type, HetPollux on
//     several), solves its round at every candidate size of the cluster
//     extended with virtual copies of a node template, and picks the size
//     with the artifact's utility rule (DesiredNodes); ThroughputAutoscale
//     is the throughput-based baseline (Or et al.). Both return the size
//     in Result.Scale; a policy without the wrapper is unchanged.
package optimizer
