package check

import (
	"cmp"
	"fmt"
	"slices"

	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/record"
)

// life is one worker process from its start record until the first of its
// exit record and the harness seeing it gone (end 0: never seen ended).
type life struct {
	w     *record.Worker
	start record.Record
	end   int64
	how   string // "exit" or "gone"
	// alive, for a life seen gone, is when the harness last saw it
	// alive: it ended in (alive, end] (end itself when not known).
	alive int64
}

// aliveAt reports whether the life certainly had not ended by t.
func (l *life) aliveAt(t int64) bool {
	switch {
	case l.end == 0:
		return true
	case l.how == "gone":
		return l.alive > t
	}
	return l.end > t
}

func (l *life) String() string {
	s := l.start
	return fmt.Sprintf("job %s incarnation %d rank %d (pid %d on %s, GPUs %v)", s.Job, s.Inc, s.Rank, s.PID, l.w.Node, s.GPUs)
}

// endsBy reports whether the life ended at or before t.
func (l *life) endsBy(t int64) bool { return l.end != 0 && l.end <= t }

type lifeKey struct {
	node, job string
	pid       int
	inc       uint64
	rank      int
}

// lives pairs every worker file with the harness's observation of its
// end. A worker_gone event that matches no worker file is an error: the
// harness learns of workers from their records only.
func lives(r *run, ws []record.Worker) ([]*life, error) {
	out := make([]*life, 0, len(ws))
	byKey := map[lifeKey]*life{}
	for i := range ws {
		w := &ws[i]
		s := w.Start()
		l := &life{w: w, start: s}
		if e, ok := w.Find(record.Exit); ok {
			l.end, l.how = e.T, "exit"
		}
		k := lifeKey{w.Node, s.Job, s.PID, s.Inc, s.Rank}
		if byKey[k] != nil {
			return nil, fmt.Errorf("%w: two record files of one worker: %s and %s", ErrHistory, byKey[k].w.File, w.File)
		}
		byKey[k] = l
		out = append(out, l)
	}
	for _, e := range r.events {
		if e.Kind != history.WorkerGone {
			continue
		}
		l := byKey[lifeKey{e.Node, e.Job, e.PID, e.Inc, e.Rank}]
		if l == nil {
			return nil, fmt.Errorf("%w: the harness saw worker pid %d of job %s incarnation %d on %s gone, but no record file names it",
				ErrHistory, e.PID, e.Job, e.Inc, e.Node)
		}
		if l.end == 0 || e.t < l.end {
			l.end, l.how, l.alive = e.t, "gone", e.t
			if e.Alive != 0 {
				l.alive = min(max(e.Alive, l.start.T), e.t)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *life) int { return cmp.Compare(a.start.T, b.start.T) })
	return out, nil
}

type gpuKey struct {
	node string
	gpu  int
}

// checkGPUs reports every pair of workers that used one GPU of one node
// at overlapping times (intervals are half-open: an exit and a start at
// the same instant do not overlap). A worker that wrote no exit ended
// between the last time the harness saw it alive and the time it saw it
// gone (its scans are 25 ms apart, longer on a loaded machine): a start
// within that window is not counted, as the two may not have overlapped.
func checkGPUs(r *run, ls []*life) []Violation {
	byGPU := map[gpuKey][]*life{}
	var keys []gpuKey
	for _, l := range ls {
		for _, g := range l.start.GPUs {
			k := gpuKey{l.w.Node, g}
			if byGPU[k] == nil {
				keys = append(keys, k)
			}
			byGPU[k] = append(byGPU[k], l)
		}
	}
	slices.SortFunc(keys, func(a, b gpuKey) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.gpu, b.gpu)) })
	var out []Violation
	for _, k := range keys {
		var active []*life
		for _, l := range byGPU[k] { // in start order
			active = slices.DeleteFunc(active, func(a *life) bool { return !a.aliveAt(l.start.T) })
			for _, a := range active {
				until := "never seen ended"
				if a.end != 0 {
					until = fmt.Sprintf("until %s (%s)", r.at(a.end), a.how)
				}
				out = append(out, Violation{GPUExclusive, l.start.T, fmt.Sprintf(
					"GPU %d of node %s used by two workers at once: %s from %s, %s; and %s from %s",
					k.gpu, k.node, a, r.at(a.start.T), until, l, r.at(l.start.T))})
			}
			active = append(active, l)
		}
	}
	return out
}

// checkEnded reports every worker whose end nobody observed.
func checkEnded(r *run, ls []*life) []Violation {
	var out []Violation
	for _, l := range ls {
		if l.end == 0 {
			out = append(out, Violation{WorkerEnded, r.end, fmt.Sprintf(
				"%s, started at %s, wrote no exit and was never seen gone by the end of the run", l, r.at(l.start.T))})
		}
	}
	return out
}
