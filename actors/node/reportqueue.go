package node

import (
	"sync"

	"pollux/actors/node/workerproto"
)

// reportQueue holds the workers' checked reports between their arrival
// and the node actor. A report that finds the queue empty wakes the
// actor with one message; the actor then takes every report queued, in
// the order they came. Under load many reports share one wake-up, where
// a message per report would cost a mailbox push and often a goroutine
// each (a node of eight workers reporting every 50 ms sends 160 a
// second).
type reportQueue struct {
	mu   sync.Mutex
	reps []workerproto.Report
}

// push queues r and reports whether the actor must be woken (the queue
// was empty: no wake-up is pending).
func (q *reportQueue) push(r workerproto.Report) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reps = append(q.reps, r)
	return len(q.reps) == 1
}

// take returns the queued reports and empties the queue, which keeps
// spare (the slice take returned last time, done with) as its buffer.
func (q *reportQueue) take(spare []workerproto.Report) []workerproto.Report {
	clear(spare) // drop the tokens and strings the old reports held
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.reps
	q.reps = spare[:0]
	return out
}
