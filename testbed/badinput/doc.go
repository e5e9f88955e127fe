// Package badinput marks the errors a testbed run returns for bad input
// (options, files or names its caller gave), so that the command that
// called it exits with its usage status while printing the error's own
// message unchanged.
package badinput
