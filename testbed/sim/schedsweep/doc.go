// Command schedsweep bounds what any cluster-size rule could achieve on
// the Pollux paper's cloud scenario (sim.CloudScenario): it runs the job
// under the Pollux allocator on an elastic cluster whose size follows a
// fixed schedule (for example 2 nodes from 0 h, 8 from 1 h, 16 from 2 h)
// and compares each run with the throughput-based autoscaler (Or et al.)
// on the same cluster settings (sim.DefaultCloud, seed 1, as `pollux sim
// --autoscale` runs them). It tries a grid of schedules, then descends
// from the three cheapest whose JCT is at most --max-jct longer than the
// baseline's, and prints every schedule's JCT and cost relative to the
// baseline and, last, the cheapest within --max-jct. The schedules know
// the future (when the job's statistical efficiency rises); an online
// rule that decides the size from what it has seen cannot do much better
// than the best of them (up to the search's resolution).
//
//	go run ./testbed/sim/schedsweep                                   # built-in profiles
//	go run ./testbed/sim/schedsweep --traces ../shared/pollux-artifact/traces
package main
