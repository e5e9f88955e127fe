package sim

import (
	"context"
	"errors"
	"math"
	"testing"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/clusterspec"
	"pollux/testbed/workload"
)

// scriptPolicy asks for scripted cluster sizes (by round, counting from 1;
// other rounds ask for nothing) and puts every job on one GPU of the node
// pick chooses; it records what each round's snapshot held.
type scriptPolicy struct {
	sizes map[int]int
	pick  func(snap *optimizer.Snapshot) int
	round int
	nodes []int
	ids   [][]string
	seen  [][]optimizer.Node
	cur   []optimizer.Placement
}

func (*scriptPolicy) Name() string { return "script" }

func (p *scriptPolicy) Allocate(snap *optimizer.Snapshot, _ *optimizer.State) (optimizer.Result, error) {
	p.round++
	p.nodes = append(p.nodes, len(snap.Nodes))
	var ids []string
	for _, n := range snap.Nodes {
		ids = append(ids, n.ID)
	}
	p.ids = append(p.ids, ids)
	p.seen = append(p.seen, append([]optimizer.Node(nil), snap.Nodes...))
	res := optimizer.Result{Placements: make([]optimizer.Placement, len(snap.Jobs))}
	for j := range snap.Jobs {
		if j == 0 {
			p.cur = append(p.cur, snap.Jobs[0].Current)
		}
		if len(snap.Nodes) > 0 {
			res.Placements[j] = optimizer.Placement{{Node: p.pick(snap), Count: 1}}
		}
	}
	if n, ok := p.sizes[p.round]; ok {
		res.Scale = &optimizer.ScaleDecision{Nodes: n, Current: len(snap.Nodes)}
	}
	return res, nil
}

func first(*optimizer.Snapshot) int { return 0 }

// cloudRun runs one toy job of epochs epochs (600 s each on one GPU) on
// an elastic cluster.
func cloudRun(t *testing.T, cloud Cloud, epochs int, pol optimizer.Policy) *Result {
	t.Helper()
	cfg := DefaultConfig()
	cfg.GPUsPerNode = 4
	cfg.Cloud = &cloud
	cat := testbed.Catalog{"toy": toyApp{epochs: epochs}}
	res, err := Run(context.Background(), cfg, cat, workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "toy", Replicas: 1, Batch: 8}}}, pol, FixedBatch, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// paidFromTimeline is the node time an observer of the timeline computes:
// every size change happens at a round, so the nodes paid for are the
// initial ones until the first round, then each round's count until the
// next round, up to the last round.
func paidFromTimeline(initial int, interval float64, tl []Sample) float64 {
	s := float64(initial) * interval
	for i := 0; i+1 < len(tl); i++ {
		s += float64(tl[i].Nodes) * (tl[i+1].Time - tl[i].Time)
	}
	return s / 3600
}

// TestCloudResize follows a scripted run: nodes asked for join only after
// the boot delay, the size is clamped to [min, max], shrinking releases
// idle nodes, and the bill matches the timeline.
func TestCloudResize(t *testing.T) {
	pol := &scriptPolicy{sizes: map[int]int{1: 4, 5: 2, 8: 0, 10: 99}, pick: first}
	cloud := Cloud{MinNodes: 1, MaxNodes: 6, InitialNodes: 1, BootDelay: 150, NodeCost: 2.5}
	res := cloudRun(t, cloud, 20, pol)
	// Asked at 60 s, ready at 210 s: they join at the round at 240 s
	// (round 4). Round 5 shrinks to 2, round 8 to the minimum 1, round
	// 10 grows to the maximum 6 (joining at round 13, at 780 s).
	wantSeen := []int{1, 1, 1, 4, 4, 2, 2, 2, 1, 1, 1, 1, 6}
	for i, w := range wantSeen {
		if i >= len(pol.nodes) {
			t.Fatalf("only %d rounds (job done at %v s)", len(pol.nodes), res.Jobs[0].Completion)
		}
		if pol.nodes[i] != w {
			t.Fatalf("round %d saw %d nodes, want %d (all %v)", i+1, pol.nodes[i], w, pol.nodes)
		}
	}
	wantPaid := []int{4, 4, 4, 4, 2, 2, 2, 1, 1, 6, 6, 6, 6}
	for i, w := range wantPaid {
		if res.Timeline[i].Nodes != w {
			t.Fatalf("after round %d %d nodes paid for, want %d", i+1, res.Timeline[i].Nodes, w)
		}
	}
	c := res.Cloud
	if want := paidFromTimeline(1, 60, res.Timeline); math.Abs(c.NodeHours-want) > 1e-9 {
		t.Fatalf("node-hours %v, timeline says %v", c.NodeHours, want)
	}
	if math.Abs(c.Cost-2.5*c.NodeHours) > 1e-9 || c.PeakNodes != 6 || c.Asked != 8 || c.Released != 3 {
		t.Fatalf("cloud result %+v", c)
	}
	// The job (on node 0 throughout) was never moved off a node that went
	// away: its current placement always names an existing node.
	for i, cur := range pol.cur {
		for _, nc := range cur {
			if nc.Node >= pol.nodes[i] {
				t.Fatalf("round %d: job on node %d of %d", i+1, nc.Node, pol.nodes[i])
			}
		}
	}
}

// TestCloudCancelsBootingFirst: shrinking while nodes still boot cancels
// them (paid from the request to the cancellation) before any joined node
// goes.
func TestCloudCancelsBootingFirst(t *testing.T) {
	pol := &scriptPolicy{sizes: map[int]int{1: 3, 2: 1}, pick: first}
	res := cloudRun(t, Cloud{MinNodes: 1, MaxNodes: 4, InitialNodes: 1, BootDelay: 600, NodeCost: 1}, 1, pol)
	end := res.Timeline[len(res.Timeline)-1].Time
	want := (end + 2*60) / 3600 // one node throughout, two for a minute
	if math.Abs(res.Cloud.NodeHours-want) > 1e-9 || res.Cloud.Released != 2 {
		t.Fatalf("node-hours %v (want %v), released %d", res.Cloud.NodeHours, want, res.Cloud.Released)
	}
	for i, n := range pol.nodes {
		if n != 1 {
			t.Fatalf("round %d saw %d nodes", i+1, n)
		}
	}
}

// TestCloudKeepsBusyNodes: a shrink never releases a node a job runs on;
// the job's placement is renumbered onto the node that stays.
func TestCloudKeepsBusyNodes(t *testing.T) {
	last := func(s *optimizer.Snapshot) int { return len(s.Nodes) - 1 }
	pol := &scriptPolicy{sizes: map[int]int{1: 1}, pick: last}
	res := cloudRun(t, Cloud{MinNodes: 0, MaxNodes: 3, InitialNodes: 3, NodeCost: 1}, 1, pol)
	if len(pol.ids) < 2 || len(pol.ids[1]) != 1 || pol.ids[1][0] != "node-2" {
		t.Fatalf("nodes seen: %v", pol.ids)
	}
	if cur := pol.cur[1]; len(cur) != 1 || cur[0].Node != 0 {
		t.Fatalf("round 2 current placement %v, want node 0 (node-2)", cur)
	}
	if res.Jobs[0].Restarts != 0 {
		t.Fatalf("the job restarted %d times", res.Jobs[0].Restarts)
	}
}

// TestCloudFixedWithoutScale: a policy that asks for no size keeps the
// initial cluster, paid for the whole run.
func TestCloudFixedWithoutScale(t *testing.T) {
	pol := &scriptPolicy{pick: first}
	res := cloudRun(t, Cloud{MinNodes: 1, MaxNodes: 5, InitialNodes: 5, NodeCost: 3}, 1, pol)
	end := res.Timeline[len(res.Timeline)-1].Time
	if math.Abs(res.Cloud.NodeHours-5*end/3600) > 1e-9 || res.Cloud.PeakNodes != 5 || res.Cloud.Asked != 0 {
		t.Fatalf("cloud result %+v over %v s", res.Cloud, end)
	}
}

// TestCloudBadConfig refuses unusable elastic clusters.
func TestCloudBadConfig(t *testing.T) {
	good := Cloud{MinNodes: 1, MaxNodes: 4, InitialNodes: 1, BootDelay: 60, NodeCost: 1}
	cases := map[string]func(c *Config){
		"min above max":                        func(c *Config) { c.Cloud.MinNodes = 5 },
		"negative min":                         func(c *Config) { c.Cloud.MinNodes = -1 },
		"no max":                               func(c *Config) { c.Cloud.MaxNodes = 0 },
		"initial below one":                    func(c *Config) { c.Cloud.InitialNodes = 0 },
		"initial above max":                    func(c *Config) { c.Cloud.InitialNodes = 5 },
		"negative cost":                        func(c *Config) { c.Cloud.NodeCost = -1 },
		"NaN cost":                             func(c *Config) { c.Cloud.NodeCost = math.NaN() },
		"infinite boot delay":                  func(c *Config) { c.Cloud.BootDelay = math.Inf(1) },
		"negative boot delay":                  func(c *Config) { c.Cloud.BootDelay = -1 },
		"typed cluster without the added type": func(c *Config) { c.Cluster = []clusterspec.Group{{Type: "a", Nodes: 1, GPUsPerNode: 4}} },
		"GPU type without a cluster":           func(c *Config) { c.Cloud.GPUType = "a" },
		"fixed nodes above the maximum": func(c *Config) {
			c.Cluster = []clusterspec.Group{{Type: "t4", Nodes: 5, GPUsPerNode: 4}, {Type: "a", Nodes: 1, GPUsPerNode: 4}}
			c.Cloud.GPUType, c.Cloud.InitialNodes = "a", 4
		},
		"fixed nodes above the initial ones": func(c *Config) {
			c.Cluster = []clusterspec.Group{{Type: "t4", Nodes: 2, GPUsPerNode: 4}, {Type: "a", Nodes: 1, GPUsPerNode: 4}}
			c.Cloud.GPUType = "a"
		},
		"typed with racks": func(c *Config) {
			c.Cluster = []clusterspec.Group{{Type: "t4", Nodes: 1, GPUsPerNode: 4}, {Type: "a", Nodes: 1, GPUsPerNode: 4}}
			c.Cloud.GPUType, c.Cloud.InitialNodes, c.Racks = "a", 2, 2
		},
		"sia semantics":    func(c *Config) { c.Semantics = SiaSemantics },
		"no GPUs per node": func(c *Config) { c.GPUsPerNode = 0 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			c := good
			cfg.Cloud = &c
			mutate(&cfg)
			if err := cfg.Validate(); !errors.Is(err, ErrBadConfig) {
				t.Fatalf("err %v, want ErrBadConfig", err)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Cloud = &good
	if err := cfg.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
}

// TestCloudScenarioBuiltin runs the cloud scenario on the built-in
// profiles: Pollux deciding the size pays less than the fixed cluster of
// the maximum size, starts small and grows as the job's statistical
// efficiency at large batches rises; the throughput-based autoscaler goes
// to the maximum and runs the fixed per-GPU batch (total batch = GPUs x
// M0).
func TestCloudScenarioBuiltin(t *testing.T) {
	cat, err := builtin.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	cloud := DefaultCloud()
	as := optimizer.Autoscale{Template: optimizer.Node{GPUs: 4}, MinNodes: cloud.MinNodes, MaxNodes: cloud.MaxNodes}
	run := func(pol optimizer.Policy, mode Mode, initial int) *Result {
		cfg := DefaultConfig()
		c := cloud
		c.InitialNodes = initial
		cfg.Cloud = &c
		res, err := Run(context.Background(), cfg, cat, CloudScenario(), pol, mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	auto := run(optimizer.NewAutoscaled(optimizer.NewPollux(), as), Adaptive, 1)
	fixed := run(optimizer.NewPollux(), Adaptive, cloud.MaxNodes)
	thr := run(optimizer.NewThroughputAutoscale(as), FixedLocal, 1)
	if !(auto.Cloud.Cost < 0.8*fixed.Cloud.Cost) {
		t.Fatalf("pollux-autoscale cost %v, fixed %v", auto.Cloud.Cost, fixed.Cloud.Cost)
	}
	quarter := auto.Timeline[len(auto.Timeline)/4].Nodes
	if !(quarter < auto.Cloud.PeakNodes) || auto.Timeline[0].Nodes > quarter {
		t.Fatalf("node count did not grow: first %d, at a quarter %d, peak %d", auto.Timeline[0].Nodes, quarter, auto.Cloud.PeakNodes)
	}
	if thr.Cloud.PeakNodes != cloud.MaxNodes {
		t.Fatalf("throughput-autoscale peaked at %d nodes", thr.Cloud.PeakNodes)
	}
	local := fixedLocal(cat["imagenet"].Limits())
	for _, s := range thr.Timeline {
		if s.GPUs > 0 && s.MeanBatch != float64(s.GPUs*local) {
			t.Fatalf("at %v s: %d GPUs ran batch %v, want %d per GPU", s.Time, s.GPUs, s.MeanBatch, local)
		}
	}
}

// TestCloudSeveralTypes follows a scripted run on a cluster of two fixed
// t4 nodes whose added nodes are a100s of 8 GPUs: the t4 nodes are there
// in every round and never released, the added nodes have the a100
// group's type and GPUs, a shrink below the fixed nodes releases only
// added ones, and the bill counts the fixed nodes too.
func TestCloudSeveralTypes(t *testing.T) {
	pol := &scriptPolicy{sizes: map[int]int{1: 5, 4: 0}, pick: first}
	cfg := DefaultConfig()
	cfg.Cluster = []clusterspec.Group{{Type: "t4", Nodes: 2, GPUsPerNode: 4}, {Type: "a100", Nodes: 1, GPUsPerNode: 8}}
	cfg.Cloud = &Cloud{MinNodes: 1, MaxNodes: 6, InitialNodes: 2, BootDelay: 0, NodeCost: 1, GPUType: "a100"}
	cat := testbed.Catalog{"toy": toyApp{epochs: 12}}
	res, err := RunTyped(context.Background(), cfg, testbed.TypedCatalog{"t4": cat, "a100": cat},
		workload.Workload{Name: "w", Jobs: []workload.Job{{Name: "a", App: "toy", Replicas: 1, Batch: 8}}}, pol, FixedBatch, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantSeen := []int{2, 5, 5, 5, 2, 2}
	for i, w := range wantSeen {
		if i >= len(pol.seen) {
			t.Fatalf("only %d rounds", len(pol.seen))
		}
		nodes := pol.seen[i]
		if len(nodes) != w {
			t.Fatalf("round %d saw %d nodes %v, want %d", i+1, len(nodes), pol.ids[i], w)
		}
		for n, node := range nodes {
			fixed := n < 2
			switch {
			case fixed && (node.ID != "t4-"+string(rune('0'+n)) || node.Type != "t4" || node.GPUs != 4):
				t.Fatalf("round %d: node %d is %+v, want the fixed t4-%d", i+1, n, node, n)
			case !fixed && (node.Type != "a100" || node.GPUs != 8):
				t.Fatalf("round %d: added node %+v, want an a100 of 8 GPUs", i+1, node)
			}
		}
	}
	if res.Cloud.PeakNodes != 5 || res.Cloud.Asked != 3 || res.Cloud.Released != 3 {
		t.Fatalf("cloud result %+v", res.Cloud)
	}
	if want := paidFromTimeline(2, 60, res.Timeline); math.Abs(res.Cloud.NodeHours-want) > 1e-9 {
		t.Fatalf("node-hours %v, timeline says %v", res.Cloud.NodeHours, want)
	}
}
