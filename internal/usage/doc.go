// Package usage marks the errors that a bad setting causes (a flag's
// value, two flags that contradict each other), so that a command can
// report them with exit status 2 and failures while running with 1.
//
// The server and agent packages return their configuration errors
// marked, with messages naming the flags they came from; cmd/pollux
// maps the mark to its exit status.
package usage
