// Package optimizer holds the cluster-wide scheduling policies: Pollux's
// goodput-driven genetic search and the Tiresias and Optimus baselines.
//
// Every policy is pure: it reads an immutable Snapshot (jobs with their
// speedup functions, nodes, the previous round's search state, a seed and
// the current time) and returns an Allocation with diagnostics. There is no
// I/O, no clock and no global randomness, so the same snapshot and seed
// always give the same allocation. The live allocator actor and the
// trace-driven testbed call the very same code.
package optimizer
