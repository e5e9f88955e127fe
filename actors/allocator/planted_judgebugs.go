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
	dropped string                  // the job whose completions are dropped
	placed  map[string]*state.State // job -> the last round's state that placed it, unfinished
	victim  string                  // the completed job the stale allocation revives
	stale   *state.State            // the state that last placed it
	rounds  int                     // rounds since its completion was seen
}

// staleAllocation plants judgebugs.StaleAllocation: from the third
// round after this leader saw a job it had placed completed, for four
// rounds, every node is sent the allocation of the last round that
// placed the job, the job under a new incarnation, as the current
// generation.
func (p *plant) staleAllocation(a *allocator, st *state.State, assign map[string]*pb.Assign) map[string]*pb.Assign {
	if !judgebugs.Planted(judgebugs.StaleAllocation) {
		return assign
	}
	if p.placed == nil {
		p.placed = map[string]*state.State{}
	}
	for id, j := range st.Jobs {
		switch {
		case !j.State.Terminal() && len(st.Allocation.Jobs[id]) > 0:
			p.placed[id] = st
		case j.State == state.Completed && p.victim == "" && p.placed[id] != nil:
			p.victim, p.stale = id, p.placed[id]
		}
	}
	if p.victim == "" {
		return assign
	}
	p.rounds++
	if p.rounds < 3 || p.rounds > 6 {
		return assign
	}
	old := *p.stale
	old.Jobs = maps.Clone(old.Jobs)
	j := *old.Jobs[p.victim]
	j.Incarnation++
	old.Jobs[p.victim] = &j
	old.Allocation.Generation, old.Allocation.Term = st.Allocation.Generation, st.Allocation.Term
	out, _ := Assignments(&old, a.assignOptions())
	a.cfg.Logger.Warn("allocator: PLANTED BUG: a stale allocation sent as the current one", "bug", judgebugs.StaleAllocation,
		"job", p.victim, "incarnation", j.Incarnation, "generation", st.Allocation.Generation)
	return out
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
