// Command schedsweep bounds what any cluster-size rule could achieve on
// the Pollux paper's cloud scenario (sim.CloudScenario): it runs the job
// under the Pollux allocator on an elastic cluster whose size follows a
// fixed schedule (for example 2 nodes from 0 h, 8 from 1 h, 16 from 2 h),
// for a grid of schedules, and compares each with the throughput-based
// autoscaler (Or et al.) on the same cluster settings. It prints every
// schedule's JCT and cost relative to the baseline and, last, the largest
// cost saving any schedule reaches at a JCT no more than --max-jct longer.
// The schedules know the future (when the job's statistical efficiency
// rises); no online rule that decides the size from what it has seen can
// do better than the best of them, up to the grid's resolution.
//
//	go run ./testbed/sim/schedsweep                                   # built-in profiles
//	go run ./testbed/sim/schedsweep --traces ../shared/pollux-artifact/traces
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	flag.Parse()
	if err := run(os.Stdout, *traces, *maxJCT); err != nil {
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
	res, err := p.pollux.Allocate(snap, prev)
	if err != nil {
		return res, err
	}
	n := p.sched.size(snap.Now)
	if len(snap.Jobs) == 0 {
		n = p.min
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

func run(w io.Writer, traces string, maxJCT float64) error {
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
	type row struct {
		s      schedule
		dj, dc float64
	}
	var rows []row
	for _, s := range grid(cloud.MaxNodes) {
		pol := optimizer.NewPollux()
		pol.Workers = 1
		res, err := sim.Run(context.Background(), cfg, cat, wl, &scheduled{pollux: pol, sched: s, min: max(cloud.MinNodes, 1)}, sim.ModeFor("pollux"), nil)
		if err != nil {
			return fmt.Errorf("schedule %v: %w", s, err)
		}
		r := row{s, res.Metrics.AvgJCT/bj - 1, res.Cloud.Cost/bc - 1}
		rows = append(rows, r)
		fmt.Fprintf(w, "%-36s JCT %.2f h (%+.1f %%), %.1f node-hours, cost %.2f (%+.1f %%)\n",
			s, res.Metrics.AvgJCT/3600, 100*r.dj, res.Cloud.NodeHours, res.Cloud.Cost, 100*r.dc)
	}
	sort.SliceStable(rows, func(a, b int) bool { return rows[a].dc < rows[b].dc })
	for _, r := range rows {
		if r.dj <= maxJCT {
			fmt.Fprintf(w, "best of %d schedules at a JCT at most %+.0f %%: %s, cost %+.1f %% at JCT %+.1f %%\n",
				len(rows), 100*maxJCT, r.s, 100*r.dc, 100*r.dj)
			return nil
		}
	}
	fmt.Fprintf(w, "none of %d schedules has a JCT at most %+.0f %%\n", len(rows), 100*maxJCT)
	return nil
}
