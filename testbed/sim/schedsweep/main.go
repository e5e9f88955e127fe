package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
)

func main() {
	traces := flag.String("traces", "", "trace directory in the artifact layout (default: the built-in profiles)")
	maxJCT := flag.Float64("max-jct", 0.10, "the JCT increase over the baseline a schedule may have")
	steps := flag.Int("refine", 12, "steepest-descent steps from each of the grid's best schedules")
	flag.Parse()
	if err := run(os.Stdout, *traces, *maxJCT, *steps); err != nil {
		fmt.Fprintln(os.Stderr, "schedsweep:", err)
		os.Exit(1)
	}
}

// schedule is a cluster size from each of its times (hours) on.
type schedule struct {
	nodes []int
	hours []float64
}

func (s schedule) String() string {
	var b strings.Builder
	for i := range s.nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d from %g h", s.nodes[i], s.hours[i])
	}
	return b.String()
}

// size is the schedule's size at now seconds.
func (s schedule) size(now float64) int {
	n := s.nodes[0]
	for i, h := range s.hours {
		if now >= h*3600 {
			n = s.nodes[i]
		}
	}
	return n
}

// scheduled is the Pollux allocator on the nodes present, asking for the
// schedule's size (the minimum once no job is left).
type scheduled struct {
	pollux *optimizer.Pollux
	sched  schedule
	min    int
}

func (p *scheduled) Name() string { return "scheduled" }

func (p *scheduled) Allocate(snap *optimizer.Snapshot, prev *optimizer.State) (optimizer.Result, error) {
	n := p.sched.size(snap.Now)
	if len(snap.Jobs) == 0 {
		n = p.min
	}
	on := snap
	if n < len(snap.Nodes) {
		// Shrinking: allocate on the first n nodes only, so that the
		// last ones are left idle and the cluster can release them.
		cp := *snap
		cp.Nodes = append([]optimizer.Node(nil), snap.Nodes...)
		for i := n; i < len(cp.Nodes); i++ {
			cp.Nodes[i].GPUs = 0
		}
		on = &cp
	}
	res, err := p.pollux.Allocate(on, prev)
	if err != nil {
		return res, err
	}
	res.Scale = &optimizer.ScaleDecision{Nodes: n, Current: len(snap.Nodes)}
	return res, nil
}

// grid is the schedules tried: two steps up to the maximum, three steps
// up, and up to the maximum then down.
func grid(maxNodes int) []schedule {
	var out []schedule
	for _, n1 := range []int{1, 2, 4, 8} {
		for _, t := range []float64{0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3} {
			out = append(out, schedule{[]int{n1, maxNodes}, []float64{0, t}})
		}
	}
	for _, n1 := range []int{1, 2, 4} {
		for _, t1 := range []float64{0.5, 1} {
			for _, n2 := range []int{4, 8, 12} {
				if n2 <= n1 {
					continue
				}
				for _, t2 := range []float64{1.5, 2, 3} {
					out = append(out, schedule{[]int{n1, n2, maxNodes}, []float64{0, t1, t2}})
				}
			}
			for _, n3 := range []int{8, 12} {
				for _, t2 := range []float64{3, 4} {
					out = append(out, schedule{[]int{n1, maxNodes, n3}, []float64{0, t1, t2}})
				}
			}
		}
	}
	return append(out, schedule{[]int{maxNodes}, []float64{0}})
}

func run(w io.Writer, traces string, maxJCT float64, steps int) error {
	var (
		cat testbed.Catalog
		err error
	)
	if traces == "" {
		cat, err = builtin.Catalog()
	} else {
		cat, err = trace.Load(traces)
	}
	if err != nil {
		return err
	}
	cfg := sim.DefaultConfig()
	cfg.Seed = 1 // pollux sim's default
	cloud := sim.DefaultCloud()
	cfg.Cloud = &cloud
	wl := sim.CloudScenario()
	as := optimizer.Autoscale{Template: optimizer.Node{GPUs: cfg.GPUsPerNode}, MinNodes: cloud.MinNodes, MaxNodes: cloud.MaxNodes}
	base, err := sim.Run(context.Background(), cfg, cat, wl, optimizer.NewThroughputAutoscale(as), sim.ModeFor("throughput-autoscale"), nil)
	if err != nil {
		return err
	}
	bj, bc := base.Metrics.AvgJCT, base.Cloud.Cost
	fmt.Fprintf(w, "throughput-autoscale: JCT %.2f h, %.1f node-hours, cost %.2f\n", bj/3600, base.Cloud.NodeHours, bc)
	seen := map[string]row{}
	eval := func(sc schedule) (row, error) {
		if r, ok := seen[sc.String()]; ok {
			return r, nil
		}
		pol := optimizer.NewPollux()
		pol.Workers = 1
		res, err := sim.Run(context.Background(), cfg, cat, wl, &scheduled{pollux: pol, sched: sc, min: max(cloud.MinNodes, 1)}, sim.ModeFor("pollux"), nil)
		if err != nil {
			return row{}, fmt.Errorf("schedule %v: %w", sc, err)
		}
		r := row{sc, res.Metrics.AvgJCT/bj - 1, res.Cloud.Cost/bc - 1}
		seen[sc.String()] = r
		fmt.Fprintf(w, "%-48s JCT %.2f h (%+.1f %%), %.1f node-hours, cost %.2f (%+.1f %%)\n",
			sc, res.Metrics.AvgJCT/3600, 100*r.dj, res.Cloud.NodeHours, res.Cloud.Cost, 100*r.dc)
		return r, nil
	}
	var feasible []row
	for _, sc := range grid(cloud.MaxNodes) {
		r, err := eval(sc)
		if err != nil {
			return err
		}
		if r.dj <= maxJCT {
			feasible = append(feasible, r)
		}
	}
	if len(feasible) == 0 {
		fmt.Fprintf(w, "none of %d schedules has a JCT at most %+.0f %%\n", len(seen), 100*maxJCT)
		return nil
	}
	sort.SliceStable(feasible, func(a, b int) bool { return feasible[a].dc < feasible[b].dc })
	best := feasible[0]
	fmt.Fprintf(w, "grid: best at a JCT at most %+.0f %%: %s, cost %+.1f %% at JCT %+.1f %%\n", 100*maxJCT, best.s, 100*best.dc, 100*best.dj)
	// Steepest descent from each of the grid's three best.
	for _, start := range feasible[:min(starts, len(feasible))] {
		at := start
		for i := 0; i < steps; i++ {
			next := at
			for _, sc := range neighbours(at.s, cloud.MaxNodes) {
				r, err := eval(sc)
				if err != nil {
					return err
				}
				if r.dj <= maxJCT && r.dc < next.dc {
					next = r
				}
			}
			if next.s.String() == at.s.String() {
				break
			}
			at = next
			fmt.Fprintf(w, "from %s, step %d: %s, cost %+.1f %% at JCT %+.1f %%\n", start.s, i+1, at.s, 100*at.dc, 100*at.dj)
		}
		if at.dc < best.dc {
			best = at
		}
	}
	fmt.Fprintf(w, "best of %d schedules at a JCT at most %+.0f %%: %s, cost %+.1f %% at JCT %+.1f %%\n",
		len(seen), 100*maxJCT, best.s, 100*best.dc, 100*best.dj)
	return nil
}

// starts is how many of the grid's best schedules the descent starts from.
const starts = 3

// row is a schedule's JCT and cost relative to the baseline's.
type row struct {
	s      schedule
	dj, dc float64
}

// sizes are the cluster sizes the refinement moves between.
var sizes = []int{1, 2, 3, 4, 6, 8, 10, 12, 14, 16}

// neighbours are the schedules one move from s: one phase's size to the
// next size up or down, one phase's start a quarter of an hour earlier or
// later, or a phase split in two at its midpoint with the second half one
// size up.
func neighbours(s schedule, maxNodes int) []schedule {
	var out []schedule
	idx := func(n int) int {
		i := sort.SearchInts(sizes, n)
		return min(i, len(sizes)-1)
	}
	with := func(f func(c *schedule)) {
		c := schedule{append([]int(nil), s.nodes...), append([]float64(nil), s.hours...)}
		f(&c)
		out = append(out, c)
	}
	for i := range s.nodes {
		k := idx(s.nodes[i])
		if k > 0 {
			with(func(c *schedule) { c.nodes[i] = sizes[k-1] })
		}
		if k+1 < len(sizes) && sizes[k+1] <= maxNodes {
			with(func(c *schedule) { c.nodes[i] = sizes[k+1] })
		}
		if i == 0 {
			continue
		}
		if h := s.hours[i] - 0.25; h > s.hours[i-1] {
			with(func(c *schedule) { c.hours[i] = h })
		}
		if h := s.hours[i] + 0.25; i+1 == len(s.hours) || h < s.hours[i+1] {
			with(func(c *schedule) { c.hours[i] = h })
		}
	}
	for i := range s.nodes {
		end := s.hours[i] + 2
		if i+1 < len(s.hours) {
			end = s.hours[i+1]
		}
		mid := math.Round((s.hours[i]+end)*2) / 4 // the midpoint, to a quarter of an hour
		k := idx(s.nodes[i])
		if mid <= s.hours[i] || mid >= end || k+1 >= len(sizes) || sizes[k+1] > maxNodes {
			continue
		}
		with(func(c *schedule) {
			c.nodes = append(c.nodes[:i+1], append([]int{sizes[k+1]}, c.nodes[i+1:]...)...)
			c.hours = append(c.hours[:i+1], append([]float64{mid}, c.hours[i+1:]...)...)
		})
	}
	return out
}
