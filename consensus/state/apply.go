package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ApplyTo validates c and applies it to s as the state machine does in a
// log entry of Raft term term, without Raft: for tools and tests that
// hold a State of their own. On error s is unchanged.
func ApplyTo(s *State, c Command, term uint64) ([]Drop, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil command", ErrInvalid)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return apply(s, c, term)
}

// apply changes s by c, appended to the log in Raft term term, or returns
// why it cannot; on error s is unchanged. For a Round or Prune it also
// returns the entries it skipped.
func apply(s *State, c Command, term uint64) ([]Drop, error) {
	switch c := c.(type) {
	case *Round:
		return applyRound(s, c, term)
	case *Prune:
		return applyPrune(s, c), nil
	}
	return nil, applyOne(s, c, term)
}

func applyOne(s *State, c Command, term uint64) error {
	switch c := c.(type) {
	case *SubmitJob:
		return applySubmit(s, c)
	case *InitCluster:
		return applyInit(s, c)
	case *BootstrapACL:
		return applyBootstrapACL(s, c)
	case *CreateToken:
		return applyCreateToken(s, c)
	case *RevokeToken:
		return applyRevokeToken(s, c)
	case *CancelJob:
		return applyCancelJob(s, c)
	case *SetQuota:
		return applySetQuota(s, c)
	case *FinishJob:
		return applyFinish(s, c)
	case *ScaleDecision:
		return applyScaleDecision(s, c, term)
	case *ScaleUpdate:
		return applyScaleUpdate(s, c, term)
	case *Lease:
		return applyLease(s, c)
	case *SetLab:
		return applySetLab(s, c)
	case *UpdateJob:
		return applyUpdate(s, c)
	case *CompleteJob:
		// Entries written before FinishJob existed (or by servers of
		// that version) apply as a FinishJob, with their incarnation
		// fence.
		st := Completed
		if c.Failed {
			st = Failed
		}
		return applyFinish(s, &FinishJob{ID: c.ID, Incarnation: c.Incarnation, State: st, Reason: c.Reason, Time: c.FinishTime})
	case *RecordProfile:
		return applyProfile(s, c)
	case *CommitAllocation:
		return applyAllocation(s, c, term)
	case *RegisterNode:
		if _, ok := s.Nodes[c.Node.ID]; !ok && len(s.Nodes) >= MaxNodes {
			return fmtErr(ErrLimit, "the cluster has %d nodes, the most it can hold; prune dead nodes first", len(s.Nodes))
		}
		if err := checkNodeLevels(&c.Node, s.Config.Levels); err != nil {
			return err
		}
		n := c.Node
		n.Addresses = slices.Clone(n.Addresses)
		n.Topology = slices.Clone(n.Topology)
		old := s.Nodes[n.ID]
		s.Nodes[n.ID] = &n
		if old != nil {
			evictChanged(s, old, &n)
		}
		return nil
	case *MarkNode:
		n, ok := s.Nodes[c.ID]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownNode, c.ID)
		}
		lost := c.Health == Dead || c.Health == Left
		if lost && n.Health != Dead && n.Health != Left {
			emit(s, EventNodeLost, s.LastRound, "", n.ID, fmt.Sprintf("node %s is %v (it had %d GPUs)", n.ID, c.Health, n.GPUs))
		}
		n.Health = c.Health
		return nil
	}
	return fmt.Errorf("%w: %T", ErrUnknownCommand, c)
}

// Replays reports whether c is a retry of the submission that made one
// of the state's jobs (same id, idempotency key and submitter): applying
// it changes nothing, and it counts against no quota.
func (s *State) Replays(c *SubmitJob) bool {
	j := s.Jobs[c.ID]
	return j != nil && c.Key != "" && j.SubmitKey == c.Key && j.Submitter == c.Submitter
}

func applySubmit(s *State, c *SubmitJob) error {
	if s.Replays(c) {
		return nil // a retry of the submission that made it
	}
	if _, ok := s.Jobs[c.ID]; ok {
		return fmt.Errorf("%w: %q", ErrJobExists, c.ID)
	}
	if len(s.Jobs) >= MaxJobs {
		return fmtErr(ErrLimit, "the cluster holds %d jobs, the most it can; finished jobs are pruned after the retention period (pollux server --retain)", len(s.Jobs))
	}
	if c.Spec.CheckpointDir == "" && s.Config.CheckpointRoot == "" {
		return invalid("job %q names no checkpoint directory and the cluster has no checkpoint root (pollux server --bootstrap --checkpoint-root DIR)", c.ID)
	}
	t, err := s.ACL.authorize(c.Submitter, RoleSubmit, "submitting a job")
	if err != nil {
		return err
	}
	if err := c.Spec.Topology.Validate(s.Config.Levels); err != nil {
		return invalid("job %q: %v", c.ID, err)
	}
	spec := c.Spec
	spec.Command = slices.Clone(spec.Command)
	if c.Owned {
		name := ""
		if t != nil {
			name = t.Name
		}
		if spec.CheckpointDir, err = admitOwned(s, c, name); err != nil {
			return err
		}
	}
	j := &Job{ID: c.ID, Spec: spec, State: Pending, SubmitTime: c.SubmitTime, SubmitKey: c.Key, specBytes: SpecSize(&spec)}
	if t != nil {
		j.Submitter, j.SubmitterName = t.Accessor, t.Name
	}
	s.Jobs[c.ID] = j
	emit(s, EventSubmitted, c.SubmitTime, c.ID, "", submitReason(j))
	return nil
}

// submitReason describes a submission: by whom, asking for what.
func submitReason(j *Job) string {
	by := "submitted"
	if j.SubmitterName != "" {
		by = "submitted by " + j.SubmitterName
	}
	r := fmt.Sprintf("%s for %d to %d GPUs", by, j.Spec.MinReplicas, j.Spec.MaxReplicas)
	if j.Spec.ResumeFrom != "" {
		r += ", resuming from job " + j.Spec.ResumeFrom
	}
	return r
}

// liveJob returns the job id if it exists, is not finished, and (when
// incarnation is not 0) runs that incarnation.
func liveJob(s *State, id string, incarnation uint64) (*Job, error) {
	j, ok := s.Jobs[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q", ErrUnknownJob, id)
	case j.State.Terminal():
		return nil, fmt.Errorf("%w: %q is %v", ErrJobFinished, id, j.State)
	case incarnation != 0 && incarnation != j.Incarnation:
		return nil, fmt.Errorf("%w: job %q report from incarnation %d, current is %d", ErrStaleIncarnation, id, incarnation, j.Incarnation)
	}
	return j, nil
}

func applyUpdate(s *State, c *UpdateJob) error {
	j, err := liveJob(s, c.ID, c.Incarnation)
	if err != nil {
		return err
	}
	if c.Set&UpdateState != 0 {
		placed := len(s.Allocation.Jobs[c.ID]) > 0
		if placed == (c.State == Pending) {
			return invalid("job %q cannot be %v while it holds %d slots", c.ID, c.State, len(s.Allocation.Jobs[c.ID]))
		}
	}
	if c.Set&UpdateAttained != 0 && c.Attained < j.Attained {
		return invalid("job %q attained service would go back from %v to %v", c.ID, j.Attained, c.Attained)
	}
	if c.Set&UpdateEpoch != 0 && c.Epoch < j.Epoch {
		return invalid("job %q epoch would go back from %d to %d", c.ID, j.Epoch, c.Epoch)
	}
	if c.Set&UpdateState != 0 {
		j.State = c.State
	}
	if c.Set&UpdateAttained != 0 {
		j.Attained = c.Attained
	}
	if c.Set&UpdateEpoch != 0 {
		j.Epoch = c.Epoch
	}
	if c.Set&UpdateProgress != 0 {
		j.Progress = c.Progress
	}
	return nil
}

func compareKey(a, b entryKey) int {
	if c := strings.Compare(a.typ, b.typ); c != 0 {
		return c
	}
	for i := range a.cfg {
		if a.cfg[i] != b.cfg[i] {
			return a.cfg[i] - b.cfg[i]
		}
	}
	return 0
}

func applyProfile(s *State, c *RecordProfile) error {
	j, err := liveJob(s, c.ID, c.Incarnation)
	if err != nil {
		return err
	}
	prof, err := mergeProfile(j, c.Entries)
	if err != nil {
		return err
	}
	j.Profile = prof
	if c.HasGrad {
		j.Grad, j.HasGrad = c.Grad, true
	}
	return nil
}

// mergeProfile returns j's profile with entries merged in (a weighted
// running mean per configuration), or an error if it would grow beyond
// maxProfile configurations.
func mergeProfile(j *Job, entries []ProfileEntry) ([]ProfileEntry, error) {
	prof := slices.Clone(j.Profile)
	for _, e := range entries {
		i, found := slices.BinarySearchFunc(prof, e.key(), func(p ProfileEntry, k entryKey) int { return compareKey(p.key(), k) })
		if !found {
			prof = slices.Insert(prof, i, e)
			continue
		}
		p := &prof[i]
		total := p.Count + e.Count
		w := float64(e.Count) / float64(total)
		p.AccumTime += (e.AccumTime - p.AccumTime) * w
		p.StepTime += (e.StepTime - p.StepTime) * w
		p.Count = total
	}
	if len(prof) > maxProfile {
		return nil, invalid("job %q would have %d profiled configurations (limit %d)", j.ID, len(prof), maxProfile)
	}
	return prof, nil
}

func applyAllocation(s *State, c *CommitAllocation, term uint64) error {
	if err := fence(s, "allocation", c.Generation, c.Term, term); err != nil {
		return err
	}
	// Checked in id order, so that the refusal (and its message) does not
	// depend on map iteration order.
	ids := slices.Sorted(maps.Keys(c.Jobs))
	used := map[string]int{}
	for _, id := range ids {
		slots := c.Jobs[id]
		j, err := liveJob(s, id, 0)
		if err != nil {
			return err
		}
		k := 0
		for _, sl := range slots {
			n, ok := s.Nodes[sl.Node]
			if !ok {
				return fmt.Errorf("%w: job %q placed on %q", ErrUnknownNode, id, sl.Node)
			}
			if n.Health == Dead || n.Health == Left {
				return invalid("job %q placed on node %q, which is %v", id, sl.Node, n.Health)
			}
			used[sl.Node] += sl.GPUs
			k += sl.GPUs
		}
		if k < j.Spec.MinReplicas || k > j.Spec.MaxReplicas {
			return invalid("job %q given %d GPUs (bounds [%d, %d])", id, k, j.Spec.MinReplicas, j.Spec.MaxReplicas)
		}
	}
	for _, node := range slices.Sorted(maps.Keys(used)) {
		if g := used[node]; g > s.Nodes[node].GPUs {
			return invalid("node %q given %d GPUs, has %d", node, g, s.Nodes[node].GPUs)
		}
	}
	next := make(map[string][]Slot, len(c.Jobs))
	for id, slots := range c.Jobs {
		slots = slices.Clone(slots)
		sortSlots(slots)
		next[id] = slots
	}
	reallocate(s, c.Generation, c.Term, next, nil, s.LastRound, "")
	return nil
}

// fence refuses an allocation decided in a term other than the one its
// log entry was appended in, or not above the committed generation.
// Raft log terms never decrease along the log, so requiring the decided
// term to be the entry's term also keeps committed terms monotonic.
func fence(s *State, what string, gen, decided, term uint64) error {
	if decided != term {
		return fmtErr(ErrStaleTerm, "%s decided in term %d, appended in term %d", what, decided, term)
	}
	if gen <= s.Allocation.Generation {
		return fmtErr(ErrStaleGeneration, "generation %d, committed %d", gen, s.Allocation.Generation)
	}
	return nil
}

// reallocate commits the next allocation: each live job whose slots
// change, or that restarts on slots, enters a new incarnation: pending
// without slots, running when it had none, otherwise rescaling (a
// restart, counted when its slots changed). Each change is an event at
// time at, quoting note (why the leader chose next) if set.
func reallocate(s *State, gen, term uint64, next map[string][]Slot, restart map[string]bool, at float64, note string) {
	for _, id := range s.JobIDs() {
		j := s.Jobs[id]
		if j.State.Terminal() {
			continue
		}
		old, cur := s.Allocation.Jobs[id], next[id]
		if slices.Equal(old, cur) && !(restart[id] && len(cur) > 0) {
			continue
		}
		j.Incarnation++
		switch {
		case len(cur) == 0:
			j.State = Pending
		case len(old) == 0:
			j.State = Running
		default:
			j.State = Rescaling
			if !slices.Equal(old, cur) {
				j.Restarts++
			}
		}
		emitReallocation(s, j, old, cur, restart[id], gen, at, note)
	}
	s.Allocation = Allocation{Generation: gen, Term: term, Jobs: next}
}
