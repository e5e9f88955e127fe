//go:build judgebugs

package allocator

import (
	"maps"

	"pollux/actors/pb"
	"pollux/consensus/state"
	"pollux/internal/judgebugs"
)

// plant is a planted bug's state (package judgebugs).
type plant struct {
	dropped string       // the job whose completions are dropped
	prev    *state.State // the state of the previous round
	stale   *state.State // the state before a completion, once one was seen
	rounds  int          // rounds since the completion was seen
}

// staleAllocation plants judgebugs.StaleAllocation: from the third
// round after a job's completion, for four rounds, every node is sent
// the allocation of the round before the completion, the completed job
// under a new incarnation, as the current generation.
func (p *plant) staleAllocation(a *allocator, st *state.State, assign map[string]*pb.Assign) map[string]*pb.Assign {
	if !judgebugs.Planted(judgebugs.StaleAllocation) {
		return assign
	}
	prev := p.prev
	p.prev = st
	if p.stale == nil {
		if prev == nil || completedSince(prev, st) == "" {
			return assign
		}
		p.stale = prev
	}
	p.rounds++
	if p.rounds < 3 || p.rounds > 6 {
		return assign
	}
	victim := completedSince(p.stale, st)
	old := *p.stale
	old.Jobs = maps.Clone(old.Jobs)
	j := *old.Jobs[victim]
	j.Incarnation++
	old.Jobs[victim] = &j
	old.Allocation.Generation, old.Allocation.Term = st.Allocation.Generation, st.Allocation.Term
	out, _ := Assignments(&old, a.assignOptions())
	a.cfg.Logger.Warn("allocator: PLANTED BUG: a stale allocation sent as the current one", "bug", judgebugs.StaleAllocation,
		"job", victim, "incarnation", j.Incarnation, "generation", st.Allocation.Generation)
	return out
}

// completedSince is a job placed in before and completed in now ("" if
// none).
func completedSince(before, now *state.State) string {
	for id, j := range now.Jobs {
		if b := before.Jobs[id]; j.State == state.Completed && b != nil && !b.State.Terminal() && len(before.Allocation.Jobs[id]) > 0 {
			return id
		}
	}
	return ""
}

// dropCompletion plants judgebugs.DropCompletion: it reports
// whether to drop this completion (every completion of the first job to
// complete).
func (p *plant) dropCompletion(a *allocator, job string, end state.JobState) bool {
	if !judgebugs.Planted(judgebugs.DropCompletion) || end != state.Completed {
		return false
	}
	if p.dropped == "" {
		p.dropped = job
	}
	if p.dropped == job {
		a.cfg.Logger.Warn("allocator: PLANTED BUG: a completion dropped", "bug", judgebugs.DropCompletion, "job", job)
		return true
	}
	return false
}
