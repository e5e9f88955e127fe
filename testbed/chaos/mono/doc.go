// Package mono reads the one clock every process of a fault-injection run
// shares: CLOCK_MONOTONIC. On Linux it is system-wide (time since boot,
// never stepped by NTP or by setting the date) and network namespaces do
// not change it, so a reading taken by a worker and one taken by the
// harness are comparable: an observation made after another, in real
// time, never carries an earlier timestamp.
//
// It also reads a process's start time from /proc, which the harness uses
// to tell a worker's pid from a later process that reuses it.
package mono
