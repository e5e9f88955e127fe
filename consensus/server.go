package consensus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"pollux/consensus/ratelimit"
	"pollux/consensus/state"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// retryDelay is the pause between attempts of a write while no leader
// can take it (an election is under way).
const retryDelay = 10 * time.Millisecond

// leaderPoll is how often a forwarded write checks whether the leader it
// was sent to is still the one this server knows.
const leaderPoll = 20 * time.Millisecond

// Stores are what a Server runs on, injected so that tests use Raft's
// in-memory transport and stores and production uses TCP and bolt
// (OpenDisk).
type Stores struct {
	Transport raft.Transport
	Logs      raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
	// Forwarder carries writes from a follower to the leader; nil means
	// a follower's writes fail with ErrNotLeader.
	Forwarder Forwarder
	// Closers are closed, in order, by Shutdown (after Raft and the
	// transport), e.g. the bolt store.
	Closers []io.Closer
	// FreeSpace, if set, reports the free bytes of the file system the
	// log is on: the leader refuses writes (ErrNoSpace) below
	// Config.MinFreeSpace instead of failing them in the log store.
	FreeSpace func() (uint64, error)
}

// Server is one member of the replicated state: a Raft node and its FSM.
type Server struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	fsm    *FSM
	stores Stores
	// barrierTerm is the term in which this server, as leader, last
	// completed a barrier: reads in that term need only verify leadership.
	barrierTerm atomic.Uint64
	closed      atomic.Bool
	leaderCh    chan bool
	stop        chan struct{}

	// failing holds, while this server leads, the peers its heartbeats
	// currently fail to reach, with their last contact.
	failingMu sync.Mutex
	failing   map[raft.ServerID]time.Time

	// limits are the submitters' token buckets while this server leads.
	limits ratelimit.Limiter
}

// watchPeers follows Raft's heartbeat observations.
func (s *Server) watchPeers(obs <-chan raft.Observation) {
	for {
		select {
		case o := <-obs:
			s.failingMu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				s.failing[d.PeerID] = d.LastContact
			case raft.ResumedHeartbeatObservation:
				delete(s.failing, d.PeerID)
			case raft.LeaderObservation:
				clear(s.failing)
			}
			s.failingMu.Unlock()
		case <-s.stop:
			return
		}
	}
}

// Unreachable returns, on the leader, the servers its heartbeats
// currently fail to reach and when each last answered.
func (s *Server) Unreachable() map[raft.ServerID]time.Time {
	s.failingMu.Lock()
	defer s.failingMu.Unlock()
	return maps.Clone(s.failing)
}

func (s *Server) relayLeadership(raw <-chan bool) {
	for {
		select {
		case v := <-raw:
			if v {
				s.limits.Reset()
			}
			select {
			case <-s.leaderCh:
			default:
			}
			s.leaderCh <- v
		case <-s.stop:
			return
		}
	}
}

// NewServer starts a Raft node on st. A server with no state waits to be
// bootstrapped (Bootstrap on one server) or added to a cluster
// (AddVoter on the leader); one with state rejoins its cluster.
func NewServer(cfg Config, st Stores) (*Server, error) {
	if cfg.ID == "" {
		return nil, fmt.Errorf("%w: server id is empty", state.ErrInvalid)
	}
	if st.Transport == nil || st.Logs == nil || st.Stable == nil || st.Snapshots == nil {
		return nil, fmt.Errorf("%w: transport and stores are required", state.ErrInvalid)
	}
	cfg = cfg.withDefaults()
	rc, err := cfg.raftConfig()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("server", string(cfg.ID)), fsm: NewFSM(), stores: st,
		leaderCh: make(chan bool, 1), stop: make(chan struct{})}
	s.fsm.notify = make(chan struct{}, 1)
	// Raft blocks on its notification channel: relay every change at once
	// and keep only the latest for the reader.
	raw := make(chan bool, 8)
	rc.NotifyCh = raw
	go s.relayLeadership(raw)
	s.raft, err = raft.NewRaft(rc, s.fsm, st.Logs, st.Stable, st.Snapshots, st.Transport)
	if err != nil {
		close(s.stop)
		return nil, fmt.Errorf("consensus: starting raft: %w", err)
	}
	s.failing = map[raft.ServerID]time.Time{}
	obs := make(chan raft.Observation, 64)
	s.raft.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	}))
	go s.watchPeers(obs)
	if t, ok := st.Transport.(*Transport); ok {
		t.serveForwards(s)
		go s.watchLeaderLoss(t.mux)
	}
	return s, nil
}

// Bootstrap makes servers (which must include this one) the initial
// cluster. On a server that already has state it does nothing, so it is
// safe to call on every start.
func (s *Server) Bootstrap(servers []raft.Server) error {
	err := s.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("consensus: bootstrap: %w", err)
	}
	return nil
}

// ID is this server's id.
func (s *Server) ID() raft.ServerID { return s.cfg.ID }

// Raft returns the underlying Raft node, for observers and statistics.
func (s *Server) Raft() *raft.Raft { return s.raft }

// Leader returns the id and Raft address of the leader as this server
// knows it (empty if none).
func (s *Server) Leader() (raft.ServerID, raft.ServerAddress) {
	addr, id := s.raft.LeaderWithID()
	return id, addr
}

// Leadership returns the current term and whether this server is its
// leader. An allocator running on the leader passes this term to
// CommitAllocation.
func (s *Server) Leadership() (term uint64, leader bool) {
	term = s.raft.CurrentTerm()
	return term, s.raft.State() == raft.Leader && s.raft.CurrentTerm() == term
}

// LocalState returns a copy of this server's state, which on a follower
// may lag behind the leader's.
func (s *Server) LocalState() *state.State { return s.fsm.State() }

// LocalJob returns a copy of one job of this server's state (nil if
// unknown) and the cluster configuration.
func (s *Server) LocalJob(id string) (*state.Job, state.ClusterConfig) { return s.fsm.Job(id) }

// LocalEvents returns events of this server's state (FSM.Events).
func (s *Server) LocalEvents(job string, since uint64, limit int) ([]state.Event, uint64) {
	return s.fsm.Events(job, since, limit)
}

// LeaderChanges delivers true when this server becomes the Raft leader
// and false when it stops being it. Only the latest change is kept if
// nobody listens; it has one reader (the allocator).
func (s *Server) LeaderChanges() <-chan bool { return s.leaderCh }

// JobsChanged receives a token (coalesced) whenever an applied command
// other than an allocation round may have changed the set of live jobs
// (a submission, a completion, a cancellation, a prune). It has one
// reader.
func (s *Server) JobsChanged() <-chan struct{} { return s.fsm.notify }

// Read returns a copy of the state that reflects every write completed
// before the call (a linearizable read). Only the leader serves it: it
// verifies its leadership with a quorum and, once per term, commits a
// barrier so that entries of earlier terms are applied.
func (s *Server) Read(ctx context.Context) (*state.State, error) {
	if s.closed.Load() {
		return nil, ErrShutdown
	}
	if s.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if err := wait(ctx, s.raft.VerifyLeader()); err != nil {
		return nil, err
	}
	term := s.raft.CurrentTerm()
	if s.barrierTerm.Load() != term {
		if err := wait(ctx, s.raft.Barrier(s.timeout(ctx))); err != nil {
			return nil, err
		}
		s.barrierTerm.Store(term)
	}
	return s.fsm.State(), nil
}

// wait waits for f or the end of ctx and maps Raft's errors to ours.
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return raftError(err)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
}

// raftError maps an error from Raft to the package's sentinels.
func raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrShutdown, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("consensus: raft: %w", err)
}

// timeout is what is left of ctx, or the write timeout.
func (s *Server) timeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Until(dl), time.Millisecond)
	}
	return s.cfg.WriteTimeout
}

// Apply commits cmds in order and returns one Result per command. On the
// leader the commands are pipelined into Raft (they share log writes and
// fsyncs); on a follower they are forwarded to the leader in one request.
// While no leader can take them (an election), Apply retries until ctx
// ends (or, without a deadline, Config.WriteTimeout). The error is for
// the whole batch (invalid command, timeout, forwarding failure); a
// refusal by the state machine is in its Result.
func (s *Server) Apply(ctx context.Context, cmds ...state.Command) ([]Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	enc := make([][]byte, len(cmds))
	for i, c := range cmds {
		b, err := state.Encode(c)
		if err != nil {
			return nil, err
		}
		enc[i] = b
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.WriteTimeout)
		defer cancel()
	}
	for {
		res, err := s.applyOnce(ctx, enc)
		if err == nil || !retriable(err) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w (last attempt: %w)", ErrTimeout, ctx.Err(), err)
		case <-time.After(retryDelay):
		}
	}
}

// retriable reports whether err certainly means that nothing was applied
// and a leader may take the write later.
func retriable(err error) bool {
	return errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader)
}

func (s *Server) applyOnce(ctx context.Context, enc [][]byte) ([]Result, error) {
	if s.closed.Load() {
		return nil, ErrShutdown
	}
	if s.raft.State() == raft.Leader {
		res, err := s.applyLocal(ctx, enc)
		if !errors.Is(err, ErrNotLeader) {
			return res, err
		}
	}
	if s.stores.Forwarder == nil {
		return nil, ErrNotLeader
	}
	leader, _ := s.Leader()
	if leader == "" || leader == s.cfg.ID {
		return nil, ErrNoLeader
	}
	resp, err := s.forward(ctx, leader, encodeRequest(enc))
	if err != nil {
		return nil, err
	}
	res, err := decodeResponse(resp, len(enc))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrForward, err)
	}
	return res, allNotLeader(res)
}

// forward sends req to leader, but gives up as soon as this server learns
// of another leader: a leader that was paused or cut off keeps the
// connection open without answering, and a write must not wait for it to
// come back when a new leader can take it. Giving up is ErrForward (the
// old leader may have committed the write before it was deposed), so the
// caller decides whether to resend.
func (s *Server) forward(ctx context.Context, leader raft.ServerID, req []byte) ([]byte, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1)
	go func() {
		b, err := s.stores.Forwarder.Forward(fctx, leader, req)
		done <- answer{b, err}
	}()
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	for {
		select {
		case a := <-done:
			return a.b, a.err
		case <-tick.C:
			if now, _ := s.Leader(); now != "" && now != leader {
				cancel()
				<-done
				return nil, fmt.Errorf("%w: leader changed from %q to %q while forwarding", ErrForward, leader, now)
			}
		}
	}
}

// applyLocal pipelines enc into the local Raft node. If every command
// was refused because this node is not the leader, the error is
// ErrNotLeader (nothing was applied).
func (s *Server) applyLocal(ctx context.Context, enc [][]byte) ([]Result, error) {
	if err := s.roomToWrite(); err != nil {
		res := make([]Result, len(enc))
		for i := range res {
			res[i].Err = err
		}
		return res, nil
	}
	timeout := s.timeout(ctx)
	res := make([]Result, len(enc))
	futures := make([]raft.ApplyFuture, len(enc))
	for i, b := range enc {
		if res[i].Err = s.admit(b, s.cfg.Now()); res[i].Err == nil {
			futures[i] = s.raft.Apply(b, timeout)
		}
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		if err := wait(ctx, f); err != nil {
			res[i].Err = err
			continue
		}
		r, ok := f.Response().(Result)
		if !ok {
			res[i].Err = fmt.Errorf("consensus: raft returned %T", f.Response())
			continue
		}
		res[i] = r
	}
	return res, allNotLeader(res)
}

// roomToWrite refuses writes while the log's file system is nearly full.
// A log store that runs out of space mid-write makes the leader step down
// and every server elect again and again, and clients wait until they
// time out; refusing up front keeps the leader and answers at once.
func (s *Server) roomToWrite() error {
	if s.stores.FreeSpace == nil {
		return nil
	}
	free, err := s.stores.FreeSpace()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	if free < s.cfg.MinFreeSpace {
		return fmt.Errorf("%w: %d bytes free, %d needed to accept writes", ErrNoSpace, free, s.cfg.MinFreeSpace)
	}
	return nil
}

func allNotLeader(res []Result) error {
	for _, r := range res {
		if !errors.Is(r.Err, ErrNotLeader) {
			return nil
		}
	}
	if len(res) == 0 {
		return nil
	}
	return ErrNotLeader
}

// serveForward applies a forwarded request on this server, which must be
// the leader (it never forwards again), and returns the encoded results.
func (s *Server) serveForward(ctx context.Context, req []byte) ([]byte, error) {
	enc, err := decodeRequest(req)
	if err != nil {
		return nil, err
	}
	res := make([]Result, len(enc))
	for i, b := range enc {
		// Decode here so that garbage is answered per command without
		// touching the log.
		if _, err := state.Decode(b); err != nil {
			res[i].Err = err
		}
	}
	valid := make([][]byte, 0, len(enc))
	for i, b := range enc {
		if res[i].Err == nil {
			valid = append(valid, b)
		}
	}
	var local []Result
	if s.closed.Load() {
		err = ErrShutdown
	} else if s.raft.State() != raft.Leader {
		err = ErrNotLeader
	} else {
		local, _ = s.applyLocal(ctx, valid)
	}
	for i := range res {
		if res[i].Err != nil {
			continue
		}
		if err != nil {
			res[i].Err = err
			continue
		}
		res[i], local = local[0], local[1:]
	}
	return encodeResponse(res), nil
}

// Authenticate returns the token of this server's state whose secret is
// secret, and whether the token table is bootstrapped: every server
// authenticates from its own replicated copy of the table.
func (s *Server) Authenticate(secret string) (state.Token, bool, error) {
	return s.fsm.Authenticate(secret)
}

// ApplyCommand commits one command (through the leader) and returns its
// error, the state machine's refusal included.
func (s *Server) ApplyCommand(ctx context.Context, c state.Command) error { return s.single(ctx, c) }

// single applies one command and returns its error.
func (s *Server) single(ctx context.Context, c state.Command) error {
	res, err := s.Apply(ctx, c)
	if err != nil {
		return err
	}
	return res[0].Err
}

// SubmitJob adds a Pending job.
func (s *Server) SubmitJob(ctx context.Context, id string, spec state.JobSpec, submitTime float64) error {
	return s.single(ctx, &state.SubmitJob{ID: id, Spec: spec, SubmitTime: submitTime})
}

// InitCluster sets the cluster's configuration if it has none (and its
// report key if it has none); with another checkpoint root than the
// configured one, or topology levels (if given: innermost first, the
// rack alone being the default) other than the configured ones, it fails
// with ErrClusterConfig. NewInitCluster makes a new cluster's.
func (s *Server) InitCluster(ctx context.Context, c state.InitCluster) error {
	c.Levels = state.NormalizeLevels(c.Levels)
	return s.single(ctx, &c)
}

// FinishJob ends a job (exactly once) as Completed, Failed or Cancelled
// and frees its GPUs; a non-zero incarnation must be the job's current
// one.
func (s *Server) FinishJob(ctx context.Context, f state.FinishJob) error {
	return s.single(ctx, &f)
}

// CommitRound commits one allocation round and returns its result
// (which entries were dropped). It fails with ErrStaleTerm or
// ErrStaleGeneration if a newer leader has taken over.
func (s *Server) CommitRound(ctx context.Context, r *state.Round) (Result, error) {
	res, err := s.Apply(ctx, r)
	if err != nil {
		return Result{}, err
	}
	return res[0], res[0].Err
}

// Prune forgets finished jobs and gone nodes; it returns the ids it
// skipped.
func (s *Server) Prune(ctx context.Context, p state.Prune) ([]state.Drop, error) {
	res, err := s.Apply(ctx, &p)
	if err != nil {
		return nil, err
	}
	return res[0].Dropped, res[0].Err
}

// RegisterNode adds or replaces a node (a zero Health means Alive).
func (s *Server) RegisterNode(ctx context.Context, n state.Node) error {
	if n.Health == 0 {
		n.Health = state.Alive
	}
	return s.single(ctx, &state.RegisterNode{Node: n})
}

// RegisterNodes adds or replaces nodes (a zero Health means Alive) in
// one batch: the commands are pipelined into Raft together, so that they
// are replicated and fsynced as one group commit, not one after the
// other. It returns each node's error (nil: registered; an invalid node
// is refused alone), or the error that kept the batch from being known
// to commit.
func (s *Server) RegisterNodes(ctx context.Context, nodes []state.Node) ([]error, error) {
	errs := make([]error, len(nodes))
	var cmds []state.Command
	var at []int
	for i, n := range nodes {
		if n.Health == 0 {
			n.Health = state.Alive
		}
		c := &state.RegisterNode{Node: n}
		if _, errs[i] = state.Encode(c); errs[i] == nil {
			cmds, at = append(cmds, c), append(at, i)
		}
	}
	res, err := s.Apply(ctx, cmds...)
	if err != nil {
		return nil, err
	}
	for k, r := range res {
		errs[at[k]] = r.Err
	}
	return errs, nil
}

// MarkNode sets a node's health.
func (s *Server) MarkNode(ctx context.Context, id string, h state.Health) error {
	return s.single(ctx, &state.MarkNode{ID: id, Health: h})
}

// AddVoter adds a voting server to the cluster. Only the leader can.
func (s *Server) AddVoter(ctx context.Context, id raft.ServerID, addr raft.ServerAddress) error {
	return wait(ctx, s.raft.AddVoter(id, addr, 0, s.timeout(ctx)))
}

// RemoveServer removes a server from the cluster. Only the leader can.
func (s *Server) RemoveServer(ctx context.Context, id raft.ServerID) error {
	return wait(ctx, s.raft.RemoveServer(id, 0, s.timeout(ctx)))
}

// LastIndex is the index of this server's last log entry.
func (s *Server) LastIndex() uint64 { return s.raft.LastIndex() }

// LogStats counts the command entries of this server's log with an index
// in (from, to], their bytes, and the entries per command (for
// benchmarks: what the state machine's writes cost).
func (s *Server) LogStats(from, to uint64) (entries int, bytes int64, byCommand map[string]int, err error) {
	var l raft.Log
	byCommand = map[string]int{}
	for i := from + 1; i <= to; i++ {
		if err := s.stores.Logs.GetLog(i, &l); err != nil {
			return entries, bytes, byCommand, fmt.Errorf("consensus: log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			entries++
			bytes += int64(len(l.Data))
			name := "undecodable"
			if c, err := state.Decode(l.Data); err == nil {
				name = fmt.Sprintf("%T", c)
			}
			byCommand[name]++
		}
	}
	return entries, bytes, byCommand, nil
}

// Servers returns the current Raft configuration.
func (s *Server) Servers() ([]raft.Server, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftError(err)
	}
	return f.Configuration().Servers, nil
}

// Shutdown stops Raft, then closes the transport (if it can be closed)
// and the stores' closers. It is safe to call more than once.
func (s *Server) Shutdown() error {
	if s.closed.Swap(true) {
		return nil
	}
	errs := []error{raftError(s.raft.Shutdown().Error())}
	close(s.stop)
	if c, ok := s.stores.Transport.(raft.WithClose); ok {
		errs = append(errs, c.Close())
	}
	for _, c := range s.stores.Closers {
		errs = append(errs, c.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consensus: shutdown: %w", err)
	}
	return nil
}
