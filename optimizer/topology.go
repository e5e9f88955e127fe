package optimizer

import (
	"fmt"
	"slices"
	"strings"

	"pollux/optimizer/topology"
)

// TopologyConstraint is where a job's replicas may run, by topology level
// (the semantics of Kueue's topology-aware scheduling and Volcano's hard
// and soft network topology): Required names a level all the job's
// replicas must share one domain of (the job waits rather than spread);
// Preferred names a level the job is kept within one domain of whenever
// its replicas fit in one, and spread over the fewest otherwise. At most
// one of them is set; the zero value leaves placement to the job's model.
type TopologyConstraint struct {
	Required  string `json:"required,omitempty" yaml:"required,omitempty"`
	Preferred string `json:"preferred,omitempty" yaml:"preferred,omitempty"`
}

// IsZero reports whether c constrains nothing.
func (c TopologyConstraint) IsZero() bool { return c.Required == "" && c.Preferred == "" }

// CheckSyntax checks c without knowing the cluster: at most one of
// Required and Preferred, naming a level by a valid name.
func (c TopologyConstraint) CheckSyntax() error {
	if c.Required != "" && c.Preferred != "" {
		return fmt.Errorf("%w: topology both required (%q) and preferred (%q); give one", ErrBadTopology, c.Required, c.Preferred)
	}
	for _, l := range []string{c.Required, c.Preferred} {
		if l != "" {
			if err := topology.CheckName("level", l); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks c against the cluster's levels (nil: the rack alone).
func (c TopologyConstraint) Validate(levels []string) error {
	if err := c.CheckSyntax(); err != nil {
		return err
	}
	for _, l := range []string{c.Required, c.Preferred} {
		if l != "" && !slices.Contains(topology.OrRack(levels), l) {
			return fmt.Errorf("%w: topology level %q is not one of the cluster's levels (%s)", ErrBadTopology, l, strings.Join(topology.OrRack(levels), ", "))
		}
	}
	return nil
}

// CheckRequired reports whether a job constrained by c, needing at least
// minReplicas GPUs when it runs, could ever be placed on nodes: a required
// level must have a domain with that many GPUs. It fails with
// ErrUnsatisfiable otherwise (the job would wait forever) and with
// ErrBadTopology for a constraint naming an unknown level.
func CheckRequired(nodes []Node, levels []string, c TopologyConstraint, minReplicas int) error {
	if err := c.Validate(levels); err != nil {
		return err
	}
	if c.Required == "" {
		return nil
	}
	levels = topology.OrRack(levels)
	at := slices.Index(levels, c.Required)
	gpus := map[string]int{}
	best, bestName := 0, ""
	for _, n := range nodes {
		key := domainKey(n.Topology, at, len(levels))
		gpus[key] += n.GPUs
		if gpus[key] > best {
			best, bestName = gpus[key], key
		}
	}
	need := max(minReplicas, 1)
	if best < need {
		if best == 0 {
			return fmt.Errorf("%w: topology required %q and the cluster has no GPUs", ErrUnsatisfiable, c.Required)
		}
		return fmt.Errorf("%w: topology required %q and the job needs %d GPUs, but the largest %s (%s) has %d", ErrUnsatisfiable, c.Required, need, c.Required, strings.ReplaceAll(bestName, "\x00", " in "), best)
	}
	return nil
}

// CheckPlacement reports whether a job constrained to gpuType ("" any)
// and by c may run on nodes (the nodes its placement uses): they must be
// of gpuType if it is set, and within one domain of c's required level
// (whether a job without a type may span types is the policy's choice).
// It fails with ErrForbidden naming what breaks, or with ErrBadTopology
// for a constraint naming an unknown level.
func CheckPlacement(nodes []Node, levels []string, gpuType string, c TopologyConstraint) error {
	if err := c.Validate(levels); err != nil {
		return err
	}
	levels = topology.OrRack(levels)
	at := slices.Index(levels, c.Required)
	for i, n := range nodes {
		switch {
		case gpuType != "" && n.Type != gpuType:
			return fmt.Errorf("%w: node %s has %s GPUs, the job runs on %s", ErrForbidden, n.ID, typeName(n.Type), gpuType)
		case i > 0 && at >= 0 && domainKey(n.Topology, at, len(levels)) != domainKey(nodes[0].Topology, at, len(levels)):
			return fmt.Errorf("%w: topology required %q and nodes %s and %s are in two", ErrForbidden, c.Required, nodes[0].ID, n.ID)
		}
	}
	return nil
}

// typeName is a GPU type as messages show it.
func typeName(t string) string {
	if t == "" {
		return "untyped"
	}
	return t
}

// domainKey names a node's domain at level at of levels levels: its path
// from that level out (a rack is known by its zone too), undeclared
// entries default.
func domainKey(domains []string, at, levels int) string {
	var b strings.Builder
	for i := at; i < max(levels, at+1); i++ {
		if i > at {
			b.WriteByte(0)
		}
		d := topology.DefaultDomain
		if i < len(domains) && domains[i] != "" {
			d = domains[i]
		}
		b.WriteString(d)
	}
	return b.String()
}

// topo is one round's topology: every node's domain index at every level
// (domains at a level numbered in order of first appearance), and each
// domain's GPUs.
type topo struct {
	levels []string
	// domain[l][n] is node n's domain at level l.
	domain [][]int32
	// gpus[l][d] is the GPUs of domain d of level l.
	gpus [][]int
	// nodesOf[d] lists the nodes of rack d, in node order.
	nodesOf [][]int
}

// racks is the number of racks.
func (t *topo) racks() int { return len(t.gpus[0]) }

// buildTopo indexes snap's topology; it fails on a node naming more
// levels than the snapshot defines.
func buildTopo(snap *Snapshot) (*topo, error) {
	levels := topology.OrRack(snap.Levels)
	if _, err := topology.ParseLevels(strings.Join(levels, ",")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	t := &topo{levels: levels, domain: make([][]int32, len(levels)), gpus: make([][]int, len(levels))}
	ids := make([]map[string]int32, len(levels))
	for l := range levels {
		t.domain[l] = make([]int32, len(snap.Nodes))
		ids[l] = map[string]int32{}
	}
	for n, node := range snap.Nodes {
		if len(node.Topology) > len(levels) {
			return nil, fmt.Errorf("%w: node %q declares %d topology levels, the cluster has %d (%s)", ErrBadSnapshot, node.ID, len(node.Topology), len(levels), strings.Join(levels, ", "))
		}
		for l := range levels {
			key := domainKey(node.Topology, l, len(levels))
			d, ok := ids[l][key]
			if !ok {
				d = int32(len(t.gpus[l]))
				ids[l][key] = d
				t.gpus[l] = append(t.gpus[l], 0)
			}
			t.domain[l][n] = d
			t.gpus[l][d] += node.GPUs
		}
	}
	if len(snap.Nodes) == 0 {
		t.gpus[0] = []int{0}
	}
	t.nodesOf = make([][]int, t.racks())
	for n := range snap.Nodes {
		r := t.domain[0][n]
		t.nodesOf[r] = append(t.nodesOf[r], n)
	}
	return t, nil
}

// level is the index of a level name, -1 for "".
func (t *topo) level(name string) int {
	if name == "" {
		return -1
	}
	return slices.Index(t.levels, name)
}

// spans reports whether pl reaches more than one domain of level l.
func (t *topo) spans(l int, pl Placement) bool {
	if len(pl) < 2 {
		return false
	}
	d := t.domain[l]
	first := d[pl[0].Node]
	for _, nc := range pl[1:] {
		if d[nc.Node] != first {
			return true
		}
	}
	return false
}

// rackCount is the number of distinct racks pl's nodes are in.
func (t *topo) rackCount(pl Placement) int {
	d := t.domain[0]
	r := 0
	for i, nc := range pl {
		seen := false
		for _, o := range pl[:i] {
			if d[o.Node] == d[nc.Node] {
				seen = true
				break
			}
		}
		if !seen {
			r++
		}
	}
	return r
}

// Racks is the number of distinct racks a placement's nodes are in, by
// the snapshot's topology (1 for a placement on one node or none).
func (s *Snapshot) Racks(p Placement) int {
	if len(p) < 2 {
		return 1
	}
	seen := map[string]bool{}
	levels := len(topology.OrRack(s.Levels))
	for _, nc := range p {
		if nc.Node >= 0 && nc.Node < len(s.Nodes) {
			seen[domainKey(s.Nodes[nc.Node].Topology, 0, levels)] = true
		}
	}
	return max(len(seen), 1)
}

// violates reports whether placement pl breaks job j's required topology.
func violates(snap *Snapshot, tp *topo, j int, pl Placement) bool {
	l := tp.level(snap.Jobs[j].Topology.Required)
	return l >= 0 && tp.spans(l, pl)
}

// holdViolations empties the placements (and layouts) of res that break
// their job's required topology, for policies that place without regard
// to topology: such a job waits rather than spread.
func holdViolations(snap *Snapshot, tp *topo, res *Result) {
	if tp.racks() < 2 {
		return
	}
	for j, pl := range res.Placements {
		if violates(snap, tp, j, pl) {
			res.Placements[j] = nil
			if j < len(res.Layouts) {
				res.Layouts[j] = nil
			}
		}
	}
}

// takeMostFreeIn is takeMostFree for job j on a cluster of several racks
// when the job's topology is required: within the domain of its level
// with the most free GPUs, if one has k (nothing otherwise: the job
// waits). Other jobs take from anywhere.
func takeMostFreeIn(snap *Snapshot, tp *topo, j int, free []int, k int) (Placement, []int) {
	l := tp.level(snap.Jobs[j].Topology.Required)
	if l < 0 || tp.racks() < 2 {
		return takeMostFree(free, k)
	}
	dom := tp.domain[l]
	sum := make([]int, len(tp.gpus[l]))
	for n, f := range free {
		sum[dom[n]] += f
	}
	best := -1
	for d, f := range sum {
		if f >= k && (best < 0 || f > sum[best]) {
			best = d
		}
	}
	if best < 0 {
		return nil, nil
	}
	masked := make([]int, len(free))
	for n, f := range free {
		if int(dom[n]) == best {
			masked[n] = f
		}
	}
	pl, layout := takeMostFree(masked, k)
	for _, nc := range pl {
		free[nc.Node] -= nc.Count
	}
	return pl, layout
}
