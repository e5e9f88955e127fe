package sim

import (
	"context"
	"fmt"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/workload"
)

// Stepper runs a simulation one round at a time, for a caller that
// changes the cluster between rounds (the federation simulator lends and
// borrows nodes). A round is Advance, then optionally SetNodes, then
// Allocate; Run is exactly that loop without SetNodes.
type Stepper struct {
	s   *state
	res *Result
}

// NewStepper checks the inputs of a run (as RunTyped does) and returns it
// before its first round.
func NewStepper(cfg Config, cats testbed.TypedCatalog, wl workload.Workload, pol optimizer.Policy, mode Mode) (*Stepper, error) {
	s, err := newState(cfg, cats, wl, pol, mode)
	if err != nil {
		return nil, err
	}
	return &Stepper{s: s, res: &Result{Policy: pol.Name(), Workload: wl.Name}}, nil
}

// Now is the simulated time, in seconds.
func (st *Stepper) Now() float64 { return st.s.now }

// Completed is how many jobs have completed.
func (st *Stepper) Completed() int {
	done := 0
	for _, j := range st.s.jobs {
		if j.done {
			done++
		}
	}
	return done
}

// Done reports whether every job has completed.
func (st *Stepper) Done() bool { return st.Completed() == len(st.s.jobs) }

// Advance moves every job forward by one interval. It fails once the
// horizon is reached with jobs still running.
func (st *Stepper) Advance() error {
	if st.s.now >= st.s.cfg.Horizon {
		return fmt.Errorf("%w: %d of %d jobs still running after %v s", ErrHorizon, len(st.s.jobs)-st.Completed(), len(st.s.jobs), st.s.cfg.Horizon)
	}
	if err := st.s.advance(); err != nil {
		return err
	}
	if st.s.cloud != nil {
		st.s.join()
	}
	return nil
}

// Allocate runs the policy on the current nodes, applies the changed
// allocations and records the round. On an elastic cluster (Config.Cloud)
// it then moves the cluster toward the size the policy asked for; the
// policy is asked even without nodes (it may want some).
func (st *Stepper) Allocate() error {
	var err error
	if len(st.s.nodes) > 0 || st.s.cloud != nil {
		err = st.s.allocate()
	} else {
		st.s.stopAll()
	}
	st.s.vacating = nil
	if err != nil {
		return err
	}
	if st.s.cloud != nil {
		st.s.resize(st.s.scale)
	}
	st.res.Rounds++
	st.res.Timeline = append(st.res.Timeline, st.s.sample())
	return nil
}

// Nodes are the nodes the policy allocates (a copy).
func (st *Stepper) Nodes() []optimizer.Node { return append([]optimizer.Node(nil), st.s.nodes...) }

// SetNodes replaces the cluster's nodes before the next Allocate. Jobs
// keep their replicas on nodes that stay (matched by ID, in job order
// while the node's new GPU count holds them); a job that loses any is
// evicted: it restarts at the next
// allocation even if the policy keeps what it has left. vacate gives, per
// node ID, the seconds the workers that held the node take to leave it
// (checkpoint and exit): a job started there waits that long on top of
// its restart.
func (st *Stepper) SetNodes(nodes []optimizer.Node, vacate map[string]float64) {
	s := st.s
	index := make(map[string]int, len(nodes))
	left := make([]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
		left[i] = n.GPUs
	}
	for _, j := range s.jobs {
		if j.done || len(j.alloc) == 0 {
			continue
		}
		var kept optimizer.Placement
		for _, nc := range j.alloc {
			i, ok := index[s.nodes[nc.Node].ID]
			if !ok || left[i] < nc.Count {
				j.evicted = true
				continue
			}
			left[i] -= nc.Count
			kept = append(kept, optimizer.NodeCount{Node: i, Count: nc.Count})
		}
		j.alloc = normalize(kept)
	}
	s.nodes = append([]optimizer.Node(nil), nodes...)
	// Racks follow the nodes' topology (nodes without one share a rack).
	s.rackOf = make([]int, len(nodes))
	racks := map[string]int{}
	for i, n := range nodes {
		if len(n.Topology) > 0 {
			r, ok := racks[n.Topology[0]]
			if !ok {
				r = len(racks) + 1
				racks[n.Topology[0]] = r
			}
			s.rackOf[i] = r
		}
	}
	s.vacating = nil
	for id, d := range vacate {
		if i, ok := index[id]; ok && d > 0 {
			if s.vacating == nil {
				s.vacating = map[int]float64{}
			}
			s.vacating[i] = d
		}
	}
}

// Jobs are the submitted, unfinished jobs as the policy sees them in the
// next Allocate (their Current placements index Nodes).
func (st *Stepper) Jobs() []optimizer.Job {
	var out []optimizer.Job
	for _, j := range st.s.active() {
		out = append(out, st.s.snapshotJob(j))
	}
	return out
}

// Usage is, per node ID, the GPUs the running jobs hold and the seconds
// until the last of their restarts on it ends (0 when every job there is
// making progress).
func (st *Stepper) Usage() map[string]NodeUse {
	out := map[string]NodeUse{}
	for _, j := range st.s.jobs {
		if j.done || !j.running() || j.evicted {
			continue
		}
		for _, nc := range j.alloc {
			id := st.s.nodes[nc.Node].ID
			u := out[id]
			u.GPUs += nc.Count
			u.Starting = max(u.Starting, j.restartLeft)
			out[id] = u
		}
	}
	return out
}

// NodeUse is how a node is used.
type NodeUse struct {
	// GPUs is how many of its GPUs jobs hold.
	GPUs int
	// Starting is the seconds until every job on it has finished its
	// restart.
	Starting float64
}

// Finish computes the per-job records and metrics of a run whose jobs
// have all completed.
func (st *Stepper) Finish(ctx context.Context) (*Result, error) {
	if !st.Done() {
		return nil, fmt.Errorf("%w: %d of %d jobs still running", ErrBadConfig, len(st.s.jobs)-st.Completed(), len(st.s.jobs))
	}
	jobs, err := st.s.results(ctx, st.res.Timeline)
	if err != nil {
		return nil, err
	}
	res := st.res
	res.Jobs = jobs
	if st.s.cloud != nil {
		res.Cloud = st.s.bill()
	}
	res.Metrics = Summarize(res.Jobs)
	res.Metrics.Contention = meanActive(res.Timeline)
	return res, nil
}

// stopAll is a round without nodes (a lab that lent all its GPUs): every
// active job stops, and none starts.
func (s *state) stopAll() {
	act := s.active()
	for _, j := range act {
		if j.running() || j.evicted {
			j.place(nil, nil, j.typ, 0, 0)
		}
		j.contSum += float64(len(act))
		j.contN++
	}
}

// WhatIf runs the policy as the next Allocate would (same jobs, same seed,
// same search state) but on nodes, and returns the GPUs it would give the
// jobs on each node, changing nothing. A job's replicas on a node not in
// nodes (or beyond its GPUs) are dropped from its current placement.
func (st *Stepper) WhatIf(nodes []optimizer.Node) (map[string]int, error) {
	s := st.s
	act := s.active()
	out := map[string]int{}
	if len(act) == 0 || len(nodes) == 0 {
		return out, nil
	}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	snap := &optimizer.Snapshot{Nodes: nodes, Now: s.now, Seed: splitmix(s.cfg.Seed ^ (s.round * 0x9e3779b97f4a7c15))}
	for _, j := range act {
		sj := s.snapshotJob(j)
		var cur optimizer.Placement
		for _, nc := range sj.Current {
			if i, ok := index[s.nodes[nc.Node].ID]; ok && nc.Count <= nodes[i].GPUs {
				cur = append(cur, optimizer.NodeCount{Node: i, Count: nc.Count})
			}
		}
		sj.Current = normalize(cur)
		snap.Jobs = append(snap.Jobs, sj)
	}
	res, err := s.pol.Allocate(snap, s.prev)
	if err != nil {
		return nil, fmt.Errorf("%w: %s at %v s (what-if): %w", ErrPolicy, s.pol.Name(), s.now, err)
	}
	for _, pl := range res.Placements {
		for _, nc := range pl {
			if nc.Node >= 0 && nc.Node < len(nodes) && nc.Count > 0 {
				out[nodes[nc.Node].ID] += nc.Count
			}
		}
	}
	return out, nil
}
