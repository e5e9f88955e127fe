package consensus

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
)

// Result is what applying one command produced: the Raft index it was
// committed at and, if the state machine refused it, why (nothing of a
// refused command is applied). Dropped names the entries of an applied
// Round or Prune that were skipped; it is not carried back to a follower
// that forwarded the command (only Index and Err are).
type Result struct {
	Index   uint64
	Err     error
	Dropped []Drop
}

// FSM is the replicated state machine. Apply is deterministic: it reads no
// clock and no randomness, and never depends on map iteration order. It
// validates a whole command against the state before changing anything.
type FSM struct {
	mu    sync.RWMutex
	state *State
	// notify, if set, receives a token (without blocking) whenever an
	// applied command may have changed the set of live jobs.
	notify chan struct{}
}

// NewFSM returns an FSM holding the empty state.
func NewFSM() *FSM { return &FSM{state: newState()} }

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM. It returns a Result.
func (f *FSM) Apply(l *raft.Log) any {
	res := Result{Index: l.Index}
	c, err := Decode(l.Data)
	if err != nil {
		res.Err = err
		return res
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res.Dropped, res.Err = apply(f.state, c, l.Term)
	if f.notify != nil && res.Err == nil && changesJobs(c) {
		select {
		case f.notify <- struct{}{}:
		default:
		}
	}
	return res
}

// changesJobs reports whether c may change the set of live jobs (what
// the job actors' hosts are told) other than by an allocation round.
func changesJobs(c Command) bool {
	switch c.(type) {
	case *SubmitJob, *CompleteJob, *FinishJob, *CancelJob, *Prune:
		return true
	}
	return false
}

// Read calls fn with the current state under a read lock; fn must not keep
// or modify it.
func (f *FSM) Read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Job returns a deep copy of one job and the cluster configuration (nil
// if the job is unknown): cheaper than State for one job.
func (f *FSM) Job(id string) (*Job, ClusterConfig) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if j := f.state.Jobs[id]; j != nil {
		return j.clone(), f.state.Config
	}
	return nil, f.state.Config
}

// Authenticate returns the token whose secret is secret (see
// ACL.Authenticate), and whether the token table is bootstrapped.
func (f *FSM) Authenticate(secret string) (Token, bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, err := f.state.ACL.Authenticate(secret)
	return t, f.state.ACL.Bootstrapped(), err
}

// State returns a deep copy of the current state.
func (f *FSM) State() *State {
	var c *State
	f.Read(func(s *State) { c = s.Clone() })
	return c
}

// Snapshot implements raft.FSM: it encodes the state now (under the read
// lock) and writes it later.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	var b []byte
	f.Read(func(s *State) { b = EncodeState(s) })
	return fsmSnapshot(b), nil
}

// Restore implements raft.FSM: it replaces the state with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshot+1))
	if err != nil {
		return fmt.Errorf("consensus: reading snapshot: %w", err)
	}
	if len(b) > maxSnapshot {
		return fmt.Errorf("%w: snapshot over %d bytes", ErrMalformed, maxSnapshot)
	}
	s, err := DecodeState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	return nil
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		return errors.Join(fmt.Errorf("consensus: writing snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}

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
		n.Health = c.Health
		return nil
	}
	return fmt.Errorf("%w: %T", ErrUnknownCommand, c)
}

func applySubmit(s *State, c *SubmitJob) error {
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
	j := &Job{ID: c.ID, Spec: spec, State: Pending, SubmitTime: c.SubmitTime}
	if t != nil {
		j.Submitter, j.SubmitterName = t.Accessor, t.Name
	}
	s.Jobs[c.ID] = j
	return nil
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
	// Raft log terms never decrease along the log, so requiring the
	// allocation's term to be its entry's term also keeps committed
	// allocation terms monotonic.
	if c.Term != term {
		return fmt.Errorf("%w: allocation decided in term %d, appended in term %d", ErrStaleTerm, c.Term, term)
	}
	if c.Generation <= s.Allocation.Generation {
		return fmt.Errorf("%w: generation %d, committed %d", ErrStaleGeneration, c.Generation, s.Allocation.Generation)
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
	for id, j := range s.Jobs {
		if j.State.Terminal() {
			continue
		}
		old, cur := s.Allocation.Jobs[id], next[id]
		if slices.Equal(old, cur) {
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
			j.Restarts++
		}
	}
	s.Allocation = Allocation{Generation: c.Generation, Term: c.Term, Jobs: next}
	return nil
}
