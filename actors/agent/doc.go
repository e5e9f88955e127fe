// Package agent assembles and runs the node agent of one GPU machine: a
// gossip member advertising the machine's GPUs, topology and GPU type,
// and the node actor (package node) that starts, stops and watches the
// workers the allocator assigns to it.
//
// It holds what the agent decides before the node actor starts: how many
// GPUs the machine has (nvidia-smi, emulated, or CPU slots pinned to
// shares of the cores), which commands, user and environment its workers
// get, and the check, once joined, that its topology fits the cluster's
// levels. `pollux agent` maps its flags to a Config and calls Run.
package agent
