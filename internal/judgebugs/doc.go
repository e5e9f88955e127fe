// Package judgebugs names the bugs planted, in test binaries only, to
// show that the fault-injection judge (testbed/chaos/check) catches a
// real bug of the running system end to end. Everything in it, and every
// hook that plants a bug, is compiled only with the build tag judgebugs;
// a normal build has this package empty and the hooks as no-ops. A
// process built with the tag plants the bug its environment names
// (POLLUX_JUDGEBUG), and none without it.
package judgebugs
