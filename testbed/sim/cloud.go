package sim

import (
	"fmt"
	"math"
	"strconv"

	"pollux/optimizer"
	"pollux/testbed/workload"
)

// Cloud makes the simulated cluster elastic, as in the Pollux paper's
// cloud experiment: after every round the cluster moves toward the size
// the policy's Result.Scale asks for, within [MinNodes, MaxNodes]; a node
// joins BootDelay seconds after it is asked for, leaves once no unfinished
// job runs on it, and is paid for from ask to release. Without a Scale the
// cluster stays at InitialNodes. On several GPU types only group GPUType
// grows and shrinks; the other groups' nodes stay and count in every size
// (docs/autoscaling.md, "The elastic testbed").
type Cloud struct {
	MinNodes     int `json:"min_nodes"`
	MaxNodes     int `json:"max_nodes"`
	InitialNodes int `json:"initial_nodes"`
	// BootDelay is the seconds from asking for a node to its joining.
	BootDelay float64 `json:"boot_delay"`
	// NodeCost is the price of one node-hour.
	NodeCost float64 `json:"node_cost"`
	// GPUType is, on a cluster of several types, the type of the nodes
	// added and released ("" on an untyped cluster).
	GPUType string `json:"gpu_type,omitempty"`
}

// Validate reports whether the cloud settings are usable.
func (c Cloud) Validate() error {
	switch {
	case c.MinNodes < 0:
		return fmt.Errorf("%w: minimum of %d nodes, want at least 0", ErrBadConfig, c.MinNodes)
	case c.MaxNodes < 1 || c.MaxNodes > 1<<16:
		return fmt.Errorf("%w: maximum of %d nodes, want 1..65536", ErrBadConfig, c.MaxNodes)
	case c.MinNodes > c.MaxNodes:
		return fmt.Errorf("%w: minimum of %d nodes above the maximum of %d", ErrBadConfig, c.MinNodes, c.MaxNodes)
	case c.InitialNodes < max(c.MinNodes, 1) || c.InitialNodes > c.MaxNodes:
		return fmt.Errorf("%w: %d initial nodes, want %d..%d", ErrBadConfig, c.InitialNodes, max(c.MinNodes, 1), c.MaxNodes)
	case !(c.BootDelay >= 0) || math.IsInf(c.BootDelay, 0):
		return fmt.Errorf("%w: boot delay %v s, want a finite number of seconds >= 0", ErrBadConfig, c.BootDelay)
	case !(c.NodeCost >= 0) || math.IsInf(c.NodeCost, 0):
		return fmt.Errorf("%w: node cost %v per node-hour, want a finite amount >= 0", ErrBadConfig, c.NodeCost)
	}
	return nil
}

// CloudResult is what an elastic cluster cost.
type CloudResult struct {
	// NodeHours is the node time paid for, booting included.
	NodeHours float64 `json:"node_hours"`
	// Cost is NodeHours times the node cost.
	Cost float64 `json:"cost"`
	// PeakNodes is the most nodes paid for at once.
	PeakNodes int `json:"peak_nodes"`
	// MeanNodes is NodeHours over the run's duration.
	MeanNodes float64 `json:"mean_nodes"`
	// Asked and Released count the nodes asked for after the start and
	// the nodes released (or cancelled while booting).
	Asked    int `json:"asked"`
	Released int `json:"released"`
}

// booting is a node asked for that has not joined yet.
type booting struct {
	id           string
	asked, ready float64
}

// cloudState is the elastic cluster's bookkeeping.
type cloudState struct {
	cfg   Cloud
	gpus  int
	typ   string          // the added nodes' GPU type
	fixed map[string]bool // nodes never released (the other types')
	next  int
	since map[string]float64 // when each joined node was asked for
	boot  []booting
	// paid is the node-seconds of the nodes already released.
	paid float64
	res  CloudResult
}

// newCloud starts the elastic cluster with its initial nodes: on a
// cluster of several types, the fixed nodes of the other types first.
func (s *state) newCloud() {
	c := &cloudState{cfg: *s.cfg.Cloud, gpus: s.cfg.GPUsPerNode, typ: s.cfg.Cloud.GPUType, fixed: map[string]bool{}, since: map[string]float64{}}
	for _, g := range s.cfg.Cluster {
		if g.Type == c.typ {
			c.gpus = g.GPUsPerNode
			continue
		}
		for i := 0; i < g.Nodes; i++ {
			id := g.Type + "-" + strconv.Itoa(i)
			s.nodes = append(s.nodes, optimizer.Node{ID: id, GPUs: g.GPUsPerNode, Type: g.Type})
			s.rackOf = append(s.rackOf, 0)
			c.fixed[id] = true
			c.since[id] = 0
		}
	}
	for len(s.nodes) < c.cfg.InitialNodes {
		id := c.newID()
		s.nodes = append(s.nodes, optimizer.Node{ID: id, GPUs: c.gpus, Type: c.typ})
		s.rackOf = append(s.rackOf, 0)
		c.since[id] = 0
	}
	c.res.PeakNodes = len(s.nodes)
	s.cloud = c
}

func (c *cloudState) newID() string {
	prefix := "node-"
	if c.typ != "" {
		prefix = c.typ + "-auto-"
	}
	id := prefix + strconv.Itoa(c.next)
	c.next++
	return id
}

// provisioned is the nodes paid for now: joined and booting.
func (s *state) provisioned() int { return len(s.nodes) + len(s.cloud.boot) }

// join adds the booted nodes whose delay has passed.
func (s *state) join() {
	c := s.cloud
	left := c.boot[:0]
	for _, b := range c.boot {
		if b.ready <= s.now {
			s.nodes = append(s.nodes, optimizer.Node{ID: b.id, GPUs: c.gpus, Type: c.typ})
			s.rackOf = append(s.rackOf, 0)
			c.since[b.id] = b.asked
			continue
		}
		left = append(left, b)
	}
	c.boot = left
}

// resize moves the cluster toward the size dec asks for (nil: no change).
func (s *state) resize(dec *optimizer.ScaleDecision) {
	c := s.cloud
	if dec == nil {
		return
	}
	target := min(max(dec.Nodes, c.cfg.MinNodes), c.cfg.MaxNodes)
	for s.provisioned() < target {
		c.boot = append(c.boot, booting{id: c.newID(), asked: s.now, ready: s.now + c.cfg.BootDelay})
		c.res.Asked++
	}
	excess := s.provisioned() - target
	for excess > 0 && len(c.boot) > 0 {
		b := c.boot[len(c.boot)-1]
		c.boot = c.boot[:len(c.boot)-1]
		c.paid += s.now - b.asked
		c.res.Released++
		excess--
	}
	if excess > 0 {
		s.release(excess)
	}
	c.res.PeakNodes = max(c.res.PeakNodes, s.provisioned())
}

// release removes up to n joined nodes that no unfinished job uses and
// that are not fixed, the last ones first, and renumbers the placements.
func (s *state) release(n int) {
	c := s.cloud
	used := make([]bool, len(s.nodes))
	for _, j := range s.jobs {
		if j.done {
			continue
		}
		for _, nc := range j.alloc {
			used[nc.Node] = true
		}
	}
	gone := make([]bool, len(s.nodes))
	for i := len(s.nodes) - 1; i >= 0 && n > 0; i-- {
		if !used[i] && !c.fixed[s.nodes[i].ID] {
			gone[i] = true
			n--
		}
	}
	renum := make([]int, len(s.nodes))
	kept := s.nodes[:0]
	for i, node := range s.nodes {
		if gone[i] {
			renum[i] = -1
			c.paid += s.now - c.since[node.ID]
			delete(c.since, node.ID)
			c.res.Released++
			continue
		}
		renum[i] = len(kept)
		kept = append(kept, node)
	}
	s.nodes = kept
	s.rackOf = s.rackOf[:len(kept)] // one rack: every entry is 0
	for _, j := range s.jobs {
		var pl optimizer.Placement
		for _, nc := range j.alloc {
			if r := renum[nc.Node]; r >= 0 {
				pl = append(pl, optimizer.NodeCount{Node: r, Count: nc.Count})
			}
		}
		j.alloc = pl
	}
}

// bill closes the books at the end of the run.
func (s *state) bill() *CloudResult {
	c := s.cloud
	paid := c.paid
	for _, since := range c.since {
		paid += s.now - since
	}
	for _, b := range c.boot {
		paid += s.now - b.asked
	}
	r := c.res
	r.NodeHours = paid / 3600
	r.Cost = r.NodeHours * c.cfg.NodeCost
	if s.now > 0 {
		r.MeanNodes = paid / s.now
	}
	return &r
}

// DefaultCloud is the cloud scenario's cluster: 1 to 16 nodes of 4 GPUs
// (the size of the artifact's testbed), starting from one, a two-minute
// boot and a node-hour at about the on-demand price of a 4-GPU T4 cloud
// instance (AWS g4dn.12xlarge in us-east-1, 3.912 USD). Cost ratios do not
// depend on the price.
func DefaultCloud() Cloud {
	return Cloud{MinNodes: 1, MaxNodes: 16, InitialNodes: 1, BootDelay: 120, NodeCost: 3.912}
}

// CloudScenario is the workload of the Pollux paper's cloud experiment:
// one ImageNet (ResNet-50) training job, alone, submitted at time 0. Its
// replicas and batch (16 GPUs, 3200) are the tuned values the artifact's
// workloads give ImageNet jobs; only fixed-configuration baselines read
// them.
func CloudScenario() workload.Workload {
	return workload.Workload{Name: "cloud-imagenet", Jobs: []workload.Job{
		{Name: "imagenet", Time: 0, App: "imagenet", Replicas: 16, Batch: 3200},
	}}
}
