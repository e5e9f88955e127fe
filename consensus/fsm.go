package consensus

import (
	"errors"
	"fmt"
	"io"
	"pollux/consensus/state"
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
	Dropped []state.Drop
}

// FSM is the replicated state machine. Apply is deterministic: it reads no
// clock and no randomness, and never depends on map iteration order. It
// validates a whole command against the state before changing anything.
type FSM struct {
	mu    sync.RWMutex
	state *state.State
	// notify, if set, receives a token (without blocking) whenever an
	// applied command may have changed the set of live jobs.
	notify chan struct{}
}

// NewFSM returns an FSM holding the empty state.
func NewFSM() *FSM { return &FSM{state: state.New()} }

var _ raft.FSM = (*FSM)(nil)

// Apply implements raft.FSM. It returns a Result.
func (f *FSM) Apply(l *raft.Log) any {
	res := Result{Index: l.Index}
	c, err := state.Decode(l.Data)
	if err != nil {
		res.Err = err
		return res
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res.Dropped, res.Err = state.ApplyTo(f.state, c, l.Term)
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
func changesJobs(c state.Command) bool {
	switch c.(type) {
	case *state.SubmitJob, *state.CompleteJob, *state.FinishJob, *state.CancelJob, *state.Prune:
		return true
	}
	return false
}

// Read calls fn with the current state under a read lock; fn must not keep
// or modify it.
func (f *FSM) Read(fn func(*state.State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Job returns a deep copy of one job and the cluster configuration (nil
// if the job is unknown): cheaper than State for one job.
func (f *FSM) Job(id string) (*state.Job, state.ClusterConfig) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if j := f.state.Jobs[id]; j != nil {
		return j.Clone(), f.state.Config
	}
	return nil, f.state.Config
}

// Events returns up to limit events after sequence number since (of job
// only, unless job is ""; all when limit <= 0) and the last sequence
// number given: cheaper than State for a reader of the history.
func (f *FSM) Events(job string, since uint64, limit int) ([]state.Event, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Events.Since(job, since, limit), f.state.Events.LastSeq()
}

// Authenticate returns the token whose secret is secret (see
// ACL.Authenticate), and whether the token table is bootstrapped.
func (f *FSM) Authenticate(secret string) (state.Token, bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, err := f.state.ACL.Authenticate(secret)
	return t, f.state.ACL.Bootstrapped(), err
}

// State returns a deep copy of the current state.
func (f *FSM) State() *state.State {
	var c *state.State
	f.Read(func(s *state.State) { c = s.Clone() })
	return c
}

// Snapshot implements raft.FSM: it encodes the state now (under the read
// lock) and writes it later.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	var b []byte
	f.Read(func(s *state.State) { b = state.EncodeState(s) })
	return fsmSnapshot(b), nil
}

// Restore implements raft.FSM: it replaces the state with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, state.MaxSnapshot+1))
	if err != nil {
		return fmt.Errorf("consensus: reading snapshot: %w", err)
	}
	if len(b) > state.MaxSnapshot {
		return fmt.Errorf("%w: snapshot over %d bytes", state.ErrMalformed, state.MaxSnapshot)
	}
	s, err := state.DecodeState(b)
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
