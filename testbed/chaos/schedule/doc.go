// Package schedule generates the seeded fault schedules of the
// fault-injection harness: for a scenario of the catalogue (leader-kill,
// follower-kill, leader-pause, agent-kill, worker-kill, cold-restart,
// agent-restart; the network faults isolate-leader, split-2-1,
// split-1-1-1, bridge, loss, latency; mixed; "all" for every one of them)
// and a seed, a deterministic list of faults with the time each begins,
// how long it lasts, and a pick that selects its victim among the
// candidates alive when it is injected. The same seed and scenario always
// give the same schedule (math/rand/v2's PCG); the driver that injects
// the faults into a running cluster reads nothing else from it.
package schedule
