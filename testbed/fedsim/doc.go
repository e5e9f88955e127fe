// Package fedsim simulates federated lab clusters in simulated time: N
// labs, each with its own cluster, workload and scheduling policy, run in
// three modes on the same workloads:
//
//   - isolated: every lab alone on its own GPUs (what it has without a
//     federation);
//   - merged: one cluster of every lab's nodes under one policy (the
//     pooling a federation can at best approach);
//   - federated: every lab schedules its own cluster, and every round the
//     federation's lease logic (cluster/federation) compares the labs'
//     bids and grants, renews, reclaims and expires leases of whole nodes;
//     a borrower's policy sees its leased GPUs as extra nodes, and when a
//     lease ends the borrowed workers checkpoint and leave before the
//     owner's jobs start there.
//
// Every lease command goes through both parties' ledgers, as it would
// through both clusters' Raft logs, and every borrower's placement on a
// lender's node is checked against the lender's ledger (Authorize); a
// refusal of either kind fails the run. Per lab it reports average JCT,
// worst finish-time fairness, GPU-hours lent and borrowed, and reclaim
// latency (from the reclaim decision until the owner's job runs on the
// GPUs).
//
// A federation is described by a JSON file (Decode; testdata/ and
// example.json show the format); the package reads no clock and draws no
// global randomness, so a file, its workloads and a seed give one result.
package fedsim
