package check

import (
	"fmt"

	"pollux/testbed/chaos/history"
)

// op is one operation: its invoke and its completion.
type op struct {
	inv, done  *history.Op
	call, ret  int64
	invokeLine int
}

// ok reports whether the operation completed with an OK.
func (o *op) ok() bool { return o.done.Type == history.OK }

// linearizableRead reports whether o is a jobs read (the whole list) a
// leader answered.
func (o *op) linearizableRead() bool {
	return o.inv.F == history.Jobs && o.ok() && !o.done.Stale
}

// linearizableView reports whether o is a read of the whole list or of
// one job that a leader answered: its Jobs are the jobs as they were.
func (o *op) linearizableView() bool {
	return (o.inv.F == history.Jobs || o.inv.F == history.GetJob) && o.ok() && !o.done.Stale
}

// event is one harness event with its time.
type event struct {
	t int64
	*history.Event
}

// run is a parsed history.
type run struct {
	epoch, end int64
	begin      history.Event
	ops        []*op // in invoke order
	events     []event
}

// parse checks the history's integrity and pairs its operations. The
// history must open with run_begin, close with run_end, hold at least one
// submission, and every invoke must have exactly one completion of the
// same operation by the same client.
func parse(lines []history.Line) (*run, error) {
	if len(lines) == 0 {
		return nil, fmt.Errorf("%w: the history is empty", ErrHistory)
	}
	first, last := lines[0], lines[len(lines)-1]
	if first.Ev == nil || first.Ev.Kind != history.RunBegin {
		return nil, fmt.Errorf("%w: the history does not open with %s", ErrHistory, history.RunBegin)
	}
	if last.Ev == nil || last.Ev.Kind != history.RunEnd {
		return nil, fmt.Errorf("%w: the history does not end with %s: truncated", ErrHistory, history.RunEnd)
	}
	r := &run{epoch: first.T, end: last.T, begin: *first.Ev}
	open := map[uint64]*op{}
	seen := map[uint64]bool{}
	submits := 0
	for i, l := range lines {
		if l.T < r.epoch {
			return nil, fmt.Errorf("%w: line %d at %d, before the run began", ErrHistory, i+1, l.T)
		}
		if e := l.Ev; e != nil {
			if (e.Kind == history.RunBegin && i != 0) || (e.Kind == history.RunEnd && i != len(lines)-1) {
				return nil, fmt.Errorf("%w: line %d: %s in the middle of the history", ErrHistory, i+1, e.Kind)
			}
			r.events = append(r.events, event{l.T, e})
			continue
		}
		o := l.Op
		if o.Type == history.Invoke {
			if seen[o.ID] {
				return nil, fmt.Errorf("%w: line %d: operation %d invoked twice", ErrHistory, i+1, o.ID)
			}
			seen[o.ID] = true
			p := &op{inv: o, call: l.T, invokeLine: i + 1}
			open[o.ID] = p
			r.ops = append(r.ops, p)
			if o.F == history.Submit {
				submits++
			}
			continue
		}
		p := open[o.ID]
		if p == nil {
			return nil, fmt.Errorf("%w: line %d: operation %d completed without an open invoke", ErrHistory, i+1, o.ID)
		}
		if p.inv.F != o.F || p.inv.Job != o.Job || p.inv.Client != o.Client {
			return nil, fmt.Errorf("%w: line %d: operation %d invoked as %s %q by client %d, completed as %s %q by client %d",
				ErrHistory, i+1, o.ID, p.inv.F, p.inv.Job, p.inv.Client, o.F, o.Job, o.Client)
		}
		p.done, p.ret = o, l.T
		delete(open, o.ID)
	}
	for _, p := range r.ops {
		if p.done == nil {
			return nil, fmt.Errorf("%w: operation %d (%s %s, line %d) never completed: truncated", ErrHistory, p.inv.ID, p.inv.F, p.inv.Job, p.invokeLine)
		}
	}
	if submits == 0 {
		return nil, fmt.Errorf("%w: no job was ever submitted", ErrHistory)
	}
	return r, nil
}
