// Package goodput is everything one training job knows about itself: its
// throughput model (seven parameters fitted from profiled step times, plus
// two for synchronising across racks, fitted once the job has run across
// racks and otherwise derived from a configured bandwidth ratio), its
// statistical efficiency (from the gradient noise scale), their product, the
// goodput, and the search for the batch size and gradient accumulation that
// maximise it on a given number of nodes and GPUs.
//
// Speedup turns a job's model into the function the allocator bids with:
// goodput on (N, K) relative to a base configuration, memoised so that a
// lookup costs a few nanoseconds and allocates nothing.
//
// The package is pure: no I/O, no clock, no randomness. Bad input is an
// error, never a panic and never a NaN that leaks out.
package goodput
