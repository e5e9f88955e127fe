// Package record is the worker-side observer of a fault-injection run:
// each worker process writes, itself, what it did to a file of its own,
// with nothing of the control plane in between. The harness enables it by
// giving each agent's environment POLLUX_TESTBED_RECORD, a directory per
// node; every worker the agent starts inherits it and appends JSON lines
// to <dir>/<job>.<incarnation>.<rank>.<pid>.jsonl:
//
//   - start: first thing the process does (its GPUs from
//     CUDA_VISIBLE_DEVICES, its pid and start time in /proc);
//   - restore: the checkpoint it read (the incarnation that wrote it, its
//     epoch and progress) or that there was none;
//   - checkpoint: a checkpoint it wrote (after the rename made it visible);
//   - done: training is finished, read before the final report is sent;
//   - exit: the last thing it does before exiting.
//
// Times are CLOCK_MONOTONIC nanoseconds (package mono), read before the
// fact for a start and after it otherwise, so that the interval a record
// claims contains what really happened. A worker killed with SIGKILL
// writes no exit: the harness records when it saw the pid gone (package
// history).
//
// The node a worker ran on is the name of the directory holding its file:
// the harness, not the worker, knows which directory it gave which agent.
// ReadRoot decodes a whole run strictly (an unknown field, a record out of
// place, a value out of range is an error naming the file and line).
package record
