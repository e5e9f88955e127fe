// Package sim is the trace-driven testbed: it replays a workload on a
// simulated cluster under any optimizer.Policy, in simulated time.
//
// Every scheduling interval each job advances by its true goodput (step
// times and gradient statistics from its testbed.Application), reports the
// configuration it ran to its own fitted throughput model and re-optimises
// its batch size; then the policy allocates GPUs and every job whose
// allocation changed pays a restart. A run ends when every job completes
// and yields per-job records, a time series and summary metrics.
//
// A cluster may have several GPU types (Config.Cluster): every job then
// has its application's traces on every type, a model per type, and runs on
// one type at a time. Semantics selects whose testbed to reproduce where
// the Pollux artifact and Sia's simulator differ (restart delays,
// calibration, when a reallocation restarts a job, batch limits,
// finish-time fairness); see semantics.go and docs/fidelity.md.
//
// A cluster may also be elastic (Config.Cloud): it starts small and grows
// or shrinks toward the size the policy asks for in Result.Scale, nodes
// joining after a boot delay and paid for from request to release (see
// cloud.go and docs/autoscaling.md).
//
// The package reads no clock and draws no global randomness: the same
// workload, applications, policy and seed give the same result.
package sim
