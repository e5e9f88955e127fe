// Package workload reads job arrival lists (CSV: name, time, application,
// num_replicas, batch_size) and generates seeded synthetic ones with the
// same shape: a Poisson arrival process over a submission window and a job
// mix over applications with the replica count and batch size that the
// fixed-size baselines use.
package workload
