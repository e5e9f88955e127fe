// Package poll waits in tests for a condition to hold, instead of
// sleeping for a guessed time and hoping it did.
//
// Tests of the cluster run on loaded machines (several test binaries on
// two cores), so the deadlines callers give are generous: a wait that
// ends as soon as the condition holds costs nothing when the machine is
// quiet and only fails when something is really wrong.
package poll
