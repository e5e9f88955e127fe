// Package suite runs what `pollux chaos` asks for and prints its verdict:
// the fault-injection scenarios one after another, each on a fresh
// cluster (package driver), the lab-loss scenario (package labloss) and
// the attack scenario (package attack), or the judgement again of kept
// runs; it prints a table or one JSON object and fails (ErrFailed) unless
// every run passed.
package suite
