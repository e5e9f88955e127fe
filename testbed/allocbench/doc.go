// Package allocbench is `pollux bench allocator`: it times the Pollux
// allocator's rounds on a seeded synthetic cluster (Synthetic), checks
// its fitness on the Python artifact's recorded rounds (Snapshots), and
// times every round of a policy replaying Sia's scale workloads on Sia's
// heterogeneous cluster made N times larger (SiaScale).
package allocbench
