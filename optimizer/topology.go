package optimizer

import (
	"fmt"
	"slices"
	"strings"
)

// RackLevel is the innermost topology level, the one every cluster has.
const RackLevel = "rack"

// DefaultDomain is the name a node's domain takes at a level it did not
// declare (in reports; in a Node it is the empty string).
const DefaultDomain = "default"

// DefaultCrossRackRatio is the cross-rack to in-rack slowdown the
// command-line tools assume when none is configured: the 2:1
// oversubscription of a common top-of-rack uplink.
const DefaultCrossRackRatio = 2.0

// maxLevels bounds the topology levels a cluster may define.
const maxLevels = 8

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
			if err := checkName("level", l); err != nil {
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
		if l != "" && !slices.Contains(levelsOr(levels), l) {
			return fmt.Errorf("%w: topology level %q is not one of the cluster's levels (%s)", ErrBadTopology, l, strings.Join(levelsOr(levels), ", "))
		}
	}
	return nil
}

// levelsOr is levels, or the rack alone when levels is empty.
func levelsOr(levels []string) []string {
	if len(levels) == 0 {
		return []string{RackLevel}
	}
	return levels
}

// ParseLevels reads a cluster's topology levels, innermost first, as a
// comma-separated list ("rack,zone"). The first must be the rack; names
// are lower-case letters, digits and '-', each at most once. The empty
// string is the rack alone.
func ParseLevels(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return []string{RackLevel}, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if err := checkName("level", f); err != nil {
			return nil, err
		}
		if slices.Contains(out, f) {
			return nil, fmt.Errorf("%w: level %q listed twice in %q", ErrBadTopology, f, s)
		}
		out = append(out, f)
	}
	if out[0] != RackLevel {
		return nil, fmt.Errorf("%w: levels %q: the first (innermost) level must be %q", ErrBadTopology, s, RackLevel)
	}
	if len(out) > maxLevels {
		return nil, fmt.Errorf("%w: %d levels, at most %d", ErrBadTopology, len(out), maxLevels)
	}
	return out, nil
}

// ParseTopology reads a node's declared place in the topology,
// "rack=r3,zone=z1", against the cluster's levels (nil: the rack alone):
// every level named once, innermost first, in the cluster's order, none
// missing. The empty string is the default domain at every level (a node
// that declares nothing is in the default rack). It returns the domain at
// every level, innermost first, as Node.Topology holds it.
func ParseTopology(s string, levels []string) ([]string, error) {
	levels = levelsOr(levels)
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	fields := strings.Split(s, ",")
	out := make([]string, 0, len(levels))
	for i, f := range fields {
		key, val, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return nil, fmt.Errorf("%w: %q in %q is not level=domain", ErrBadTopology, f, s)
		}
		if err := checkName("level", key); err != nil {
			return nil, err
		}
		if err := checkName("domain", val); err != nil {
			return nil, err
		}
		switch at := slices.Index(levels, key); {
		case at < 0:
			return nil, fmt.Errorf("%w: level %q in %q is not one of the cluster's levels (%s)", ErrBadTopology, key, s, strings.Join(levels, ", "))
		case at < i:
			return nil, fmt.Errorf("%w: level %q in %q is out of order or repeated: give %s in this order", ErrBadTopology, key, s, strings.Join(levels, ", "))
		case at > i:
			return nil, fmt.Errorf("%w: level %q missing from %q: give %s in this order", ErrBadTopology, levels[i], s, strings.Join(levels, ", "))
		}
		out = append(out, val)
	}
	if len(out) < len(levels) {
		return nil, fmt.Errorf("%w: level %q missing from %q: give %s in this order", ErrBadTopology, levels[len(out)], s, strings.Join(levels, ", "))
	}
	return out, nil
}

// FormatTopology is the inverse of ParseTopology ("" for the default
// domain everywhere); undeclared levels show as DefaultDomain.
func FormatTopology(topology []string, levels []string) string {
	if len(topology) == 0 {
		return ""
	}
	levels = levelsOr(levels)
	parts := make([]string, len(levels))
	for i, l := range levels {
		d := DefaultDomain
		if i < len(topology) && topology[i] != "" {
			d = topology[i]
		}
		parts[i] = l + "=" + d
	}
	return strings.Join(parts, ",")
}

// CheckName reports whether s is a valid name of a topology level, a
// domain or a GPU type (what = "level", "domain", "GPU type"): 1 to 63
// lower-case letters, digits, '-', '_' and '.', starting with a letter or
// digit. The error wraps ErrBadTopology.
func CheckName(what, s string) error { return checkName(what, s) }

// checkName accepts names of 1 to 63 lower-case letters, digits, '-', '_'
// and '.', starting with a letter or digit.
func checkName(what, s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("%w: %s name %q must have 1 to 63 characters", ErrBadTopology, what, s)
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '-' || c == '_' || c == '.')
		if !ok {
			return fmt.Errorf("%w: %s name %q: use lower-case letters, digits, '-', '_' and '.', starting with a letter or digit", ErrBadTopology, what, s)
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
	levels = levelsOr(levels)
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
	levels = levelsOr(levels)
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
func domainKey(topology []string, at, levels int) string {
	var b strings.Builder
	for i := at; i < max(levels, at+1); i++ {
		if i > at {
			b.WriteByte(0)
		}
		d := DefaultDomain
		if i < len(topology) && topology[i] != "" {
			d = topology[i]
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
	levels := levelsOr(snap.Levels)
	if _, err := ParseLevels(strings.Join(levels, ",")); err != nil {
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

// Racks is the number of distinct racks a placement's nodes are in, by
// the snapshot's topology (1 for a placement on one node or none).
func (s *Snapshot) Racks(p Placement) int {
	if len(p) < 2 {
		return 1
	}
	seen := map[string]bool{}
	levels := len(levelsOr(s.Levels))
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
