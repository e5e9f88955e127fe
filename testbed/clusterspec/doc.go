// Package clusterspec reads the shape of a simulated cluster: groups of
// nodes, each group one GPU type (named by the suffix of its trace files,
// e.g. aws for T4s, rtx for RTX 2080 Tis, dgx-ext for A100s) with a node
// count and GPUs per node. A spec comes from a preset name ("hetero" is
// Sia's 64-GPU cluster), an inline list ("aws:6,rtx:3,dgx-ext:2", or
// "aws:6x4" to give the GPUs per node), or a CSV file with the header
// gpu_type,nodes,gpus_per_node. Errors name the flag entry or the file and
// line.
package clusterspec
