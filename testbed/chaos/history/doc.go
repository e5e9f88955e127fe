// Package history is the harness's own record of a fault-injection run,
// in the manner of Jepsen: every operation it sends to the cluster's API
// (an invoke line before the request leaves, then one completion: ok,
// fail when the answer says it definitely did not happen, info when the
// outcome is unknown, a timeout or a broken connection), with the answer;
// and what it does and sees itself as the harness: processes it starts,
// signals it sends, their exits, worker processes it saw gone, faults it
// injected and healed. Nothing in it comes from the system under test
// other than the API's answers.
//
// The file is JSON lines written by one process: each line is a Line
// holding either an Op or an Event, stamped with CLOCK_MONOTONIC (package
// mono) under the recorder's lock, so the file is in time order. An invoke
// is stamped before its request is sent and a completion after its answer
// arrived, so the interval of an operation contains its real effect. A
// run begins with a run-begin event listing the faults scheduled and ends
// with a run-end event: a file without the end was truncated.
//
// Decode reads such a file back, strictly: an unknown field, a field a
// kind does not carry, a value out of range or a torn last line is an
// error naming the file and line.
package history
