package state

import (
	"fmt"
	"slices"
	"strings"

	"pollux/optimizer"
	"pollux/optimizer/topology"
)

// Node attributes (topology, GPU type), the cluster's topology levels and
// a job's placement constraints (topology, GPU type) were added after the
// first encodings. In commands they are encoded last, and only when set,
// so that entries written before still decode and mean what they meant;
// an encoded block that sets nothing is malformed (every value has one
// encoding). Snapshots of version 3 always carry them. A job's declared
// epochs came later still: in a submission they follow the placement
// constraints (encoded empty then, if the job has none), only when
// declared; snapshots of version 8 always carry them.

// maxLevels bounds the topology levels of a cluster (and so a node's
// topology).
const maxLevels = 8

// encodeNodeAttrs writes a node's topology and GPU type.
func encodeNodeAttrs(w *writer, n *Node) {
	w.strs(n.Topology)
	w.str(n.GPUType)
}

func decodeNodeAttrs(r *reader, n *Node) {
	n.Topology = r.strs(maxLevels)
	n.GPUType = r.str()
}

func nodeAttrsSet(n *Node) bool { return len(n.Topology) > 0 || n.GPUType != "" }

// encodeSpecAttrs writes a job spec's placement constraints.
func encodeSpecAttrs(w *writer, s *JobSpec) {
	w.str(s.Topology.Required)
	w.str(s.Topology.Preferred)
	w.str(s.GPUType)
}

func decodeSpecAttrs(r *reader, s *JobSpec) {
	s.Topology.Required = r.str()
	s.Topology.Preferred = r.str()
	s.GPUType = r.str()
}

func specAttrsSet(s *JobSpec) bool { return !s.Topology.IsZero() || s.GPUType != "" }

// more reports whether an optional trailing block follows.
func (r *reader) more() bool { return r.err == nil && len(r.b) > 0 }

// checkNodeAttrs validates a node's topology and GPU type by themselves:
// valid names, at most maxLevels levels, the first being its rack.
func checkNodeAttrs(n *Node) error {
	if len(n.Topology) > maxLevels {
		return invalid("node %q declares %d topology levels (limit %d)", n.ID, len(n.Topology), maxLevels)
	}
	for _, d := range n.Topology {
		if err := topology.CheckName("domain", d); err != nil {
			return invalid("node %q topology: %v", n.ID, err)
		}
	}
	if len(n.Topology) > 0 && n.Topology[0] != n.Rack {
		return invalid("node %q in rack %q has topology %q, which starts with another rack", n.ID, n.Rack, strings.Join(n.Topology, ","))
	}
	if n.GPUType != "" {
		if err := topology.CheckName("GPU type", n.GPUType); err != nil {
			return invalid("node %q: %v", n.ID, err)
		}
	}
	return nil
}

// checkNodeLevels checks a node's topology against the cluster's levels:
// a node that declares a topology names a domain at every level.
func checkNodeLevels(n *Node, levels []string) error {
	want := max(len(levels), 1)
	if len(n.Topology) > 0 && len(n.Topology) != want {
		return invalid("node %q declares %d topology levels, the cluster has %d (%s)", n.ID, len(n.Topology), want,
			strings.Join((ClusterConfig{Levels: levels}).TopologyLevels(), ", "))
	}
	return nil
}

// checkLevels validates a cluster's topology levels: nil (the rack
// alone), or two or more levels, the rack first (the rack alone is
// written as nil, so that it has one encoding).
func checkLevels(levels []string) error {
	if levels == nil {
		return nil
	}
	if len(levels) < 2 {
		return invalid("topology levels %q: the rack alone is the default, give none", strings.Join(levels, ","))
	}
	if len(levels) > maxLevels {
		return invalid("%d topology levels (limit %d)", len(levels), maxLevels)
	}
	if _, err := topology.ParseLevels(strings.Join(levels, ",")); err != nil || slices.Contains(levels, "") {
		return invalid("topology levels %q: %v", strings.Join(levels, ","), err)
	}
	return nil
}

// NormalizeLevels is levels as the state holds them: nil for the rack
// alone.
func NormalizeLevels(levels []string) []string {
	if len(levels) == 0 || len(levels) == 1 && levels[0] == topology.RackLevel {
		return nil
	}
	return slices.Clone(levels)
}

// checkSpecAttrs validates a job's placement constraints by themselves.
func checkSpecAttrs(s *JobSpec) error {
	if s.Epochs < 0 || s.Epochs > optimizer.MaxEpochs {
		return invalid("job declares %d epochs (want 0, not declared, to %d)", s.Epochs, optimizer.MaxEpochs)
	}
	if err := s.Topology.CheckSyntax(); err != nil {
		return invalid("%v", err)
	}
	if s.GPUType != "" {
		if err := topology.CheckName("GPU type", s.GPUType); err != nil {
			return invalid("%v", err)
		}
	}
	return nil
}

// checkConstraints reports whether job j may run on the nodes of slots as
// s holds them: of its GPU type if it names one, within one domain of its
// required topology level (optimizer.CheckPlacement). Whatever decided a
// placement, one that breaks these is never committed.
func checkConstraints(s *State, j *Job, slots []Slot) error {
	if j.Spec.GPUType == "" && j.Spec.Topology.Required == "" {
		return nil
	}
	nodes := make([]optimizer.Node, 0, len(slots))
	for _, sl := range slots {
		if n := s.Nodes[sl.Node]; n != nil {
			nodes = append(nodes, optimizer.Node{ID: n.ID, GPUs: n.GPUs, Type: n.GPUType, Topology: n.Domains()})
		}
	}
	if err := optimizer.CheckPlacement(nodes, s.Config.Levels, j.Spec.GPUType, j.Spec.Topology); err != nil {
		return invalid("job %q: %v", j.ID, err)
	}
	return nil
}

// evictChanged takes their GPUs from the jobs placed on node old, now
// registered again as n, where the node no longer is what they were
// placed on: an agent restarted with another GPU type or place in the
// topology is another machine (its workers died with the agent), and one
// restarted with fewer GPUs cannot hold what was placed on it. Such a job
// waits (Pending, a new incarnation) until the next round places it
// afresh, as a round that gives it nothing would do; the allocation
// never shows a job on a node it was not placed on.
func evictChanged(s *State, old, n *Node) {
	moved := old.GPUType != n.GPUType || !slices.Equal(old.Domains(), n.Domains())
	used := s.UsedGPUs()[n.ID]
	if !moved && used <= n.GPUs {
		return
	}
	for _, id := range s.JobIDs() {
		j := s.Jobs[id]
		if j.State.Terminal() || !slices.ContainsFunc(s.Allocation.Jobs[id], func(sl Slot) bool { return sl.Node == n.ID }) {
			continue
		}
		old := s.Allocation.Jobs[id]
		delete(s.Allocation.Jobs, id)
		j.Incarnation++
		j.State = Pending
		emit(s, EventPreempted, s.LastRound, id, "", fmt.Sprintf("lost its %s: node %s changed (now %d GPUs, type %q, topology %v)",
			slotsText(old), n.ID, n.GPUs, n.GPUType, n.Domains()))
	}
}
