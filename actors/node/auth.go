package node

import (
	"errors"
	"fmt"
	"sync"

	"pollux/actors/node/workerproto"
)

// errReportRefused marks a report the node refuses: not of a run it has,
// without its rank's token, or a done report it may not send.
var errReportRefused = errors.New("node: report refused")

// reportAuth holds the report tokens of the runs the node has, for the
// report listener (and in-process workers) to check every report before
// it reaches the actor. The actor keeps it up to date.
type reportAuth struct {
	mu   sync.Mutex
	runs map[runKey]*runAuth
}

type runAuth struct {
	first   int      // rank of tokens[0]
	tokens  []string // by local rank
	current bool     // assigned, not being stopped
}

func newReportAuth() *reportAuth { return &reportAuth{runs: map[runKey]*runAuth{}} }

// add registers a run the node is to start.
func (a *reportAuth) add(key runKey, first int, tokens []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs[key] = &runAuth{first: first, tokens: tokens, current: true}
}

// stopping marks a run no longer current: its workers' reports still
// count, a done report does not.
func (a *reportAuth) stopping(key runKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.runs[key]; r != nil {
		r.current = false
	}
}

// remove forgets a run.
func (a *reportAuth) remove(key runKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.runs, key)
}

// check says why r is refused (an error wrapping errReportRefused), or
// nil: it must belong to a run of this node, carry its rank's token, and
// be a done report only from rank 0 of a current run.
func (a *reportAuth) check(r workerproto.Report) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	run := a.runs[runKey{r.Job, r.Incarnation}]
	switch {
	case run == nil:
		return fmt.Errorf("%w: job %s incarnation %d does not run on this node", errReportRefused, r.Job, r.Incarnation)
	case r.Rank < run.first || r.Rank >= run.first+len(run.tokens):
		return fmt.Errorf("%w: rank %d of job %s incarnation %d does not run on this node", errReportRefused, r.Rank, r.Job, r.Incarnation)
	case r.Token == "":
		return fmt.Errorf("%w: no report token", errReportRefused)
	case !workerproto.SameToken(run.tokens[r.Rank-run.first], r.Token):
		return fmt.Errorf("%w: wrong report token for rank %d", errReportRefused, r.Rank)
	case r.Done && r.Rank != 0:
		return fmt.Errorf("%w: done from rank %d (only rank 0 reports done)", errReportRefused, r.Rank)
	case r.Done && !run.current:
		return fmt.Errorf("%w: done from incarnation %d, which is no longer current", errReportRefused, r.Incarnation)
	}
	return nil
}
