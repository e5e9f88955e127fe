// Package proc starts and controls the processes of a fault-injection
// run: servers, agents and anything else the harness forks. Each child
// runs in a process group of its own (Setpgid), so signals reach its
// children too: Kill is kill -9 of the whole group, Stop and Cont pause
// and resume it. Every child is reaped by a goroutine as soon as it exits,
// and a Group kills every group it started (and every group it was told
// to track, such as an orphaned worker's) on Close, which ForTest also
// arranges through t.Cleanup so that a failing test leaves nothing behind.
//
// Alive and WaitGone observe arbitrary pids, which is how the harness
// decides that an orphaned worker has released its GPUs.
package proc
