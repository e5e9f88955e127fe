package fedsim

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/sim"
	"pollux/testbed/workload"
)

// Options are what a run needs besides the federation and its workloads.
type Options struct {
	// Catalog holds every application the workloads name.
	Catalog testbed.Catalog
	// NewPolicy returns a fresh policy by name (one per cluster and mode).
	NewPolicy func(name string) (optimizer.Policy, error)
	// Seed drives every policy's random choices.
	Seed uint64
	// Parallel is how many clusters to simulate at once (at least 1).
	Parallel int
	// Progress, if set, is called (from several goroutines) with a
	// mode's name and its jobs completed so far out of its total.
	Progress func(mode string, done, total int)
	// Log receives the refusals of injected commands and orders (nil:
	// discarded).
	Log *slog.Logger
}

// config is the simulated cluster of nodes nodes.
func (fed *Federation) config(nodes int, seed uint64) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Nodes, cfg.GPUsPerNode = nodes, fed.Labs[0].GPUsPerNode
	cfg.Interval, cfg.Restart, cfg.Seed = fed.Interval, fed.Restart, seed
	return cfg
}

// Run simulates the federation in the three modes; wls are the labs'
// workloads in lab order (see Workloads).
func Run(ctx context.Context, fed *Federation, wls []workload.Workload, opt Options) (*Report, error) {
	if len(wls) != len(fed.Labs) {
		return nil, fmt.Errorf("%w: %d workloads for %d labs", ErrWorkload, len(wls), len(fed.Labs))
	}
	for _, lab := range fed.Labs {
		if _, err := opt.NewPolicy(lab.Policy); err != nil {
			return nil, fmt.Errorf("%w: lab %s: %w", ErrBadFile, lab.Name, err)
		}
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	cats := testbed.TypedCatalog{"": opt.Catalog}
	report := &Report{Interval: fed.Interval}
	report.Modes.Isolated = &ModeReport{Labs: map[string]*LabReport{}}
	var mu sync.Mutex
	tasks := []func(context.Context) error{}
	for i, lab := range fed.Labs {
		tasks = append(tasks, func(ctx context.Context) error {
			pol, _ := opt.NewPolicy(lab.Policy)
			res, err := sim.RunTyped(ctx, fed.config(len(lab.Nodes), opt.Seed), cats, wls[i], pol, sim.ModeFor(lab.Policy), progress(opt, "isolated/"+lab.Name))
			if err != nil {
				return fmt.Errorf("isolated %s: %w", lab.Name, err)
			}
			mu.Lock()
			defer mu.Unlock()
			report.Modes.Isolated.Labs[lab.Name] = labReport(lab.GPUs(), res.Jobs)
			report.Modes.Isolated.Rounds += res.Rounds
			return nil
		})
	}
	tasks = append(tasks, func(ctx context.Context) error {
		var err error
		report.Modes.Merged, err = fed.merged(ctx, cats, wls, opt)
		return err
	}, func(ctx context.Context) error {
		var err error
		report.Modes.Federated, err = fed.federated(ctx, cats, wls, opt)
		return err
	})
	if err := runAll(ctx, max(opt.Parallel, 1), tasks); err != nil {
		return nil, err
	}
	report.Modes.Isolated.finish()
	report.targets()
	return report, nil
}

// progress adapts Options.Progress to one simulation.
func progress(opt Options, mode string) sim.ProgressFunc {
	if opt.Progress == nil {
		return nil
	}
	return func(_ float64, done, total int) { opt.Progress(mode, done, total) }
}

// runAll runs tasks on workers goroutines; the first error cancels the
// others and is returned.
func runAll(ctx context.Context, workers int, tasks []func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan func(context.Context) error)
	)
	for range min(workers, len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				if err := t(ctx); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
	for _, t := range tasks {
		next <- t
	}
	close(next)
	wg.Wait()
	return first
}

// merged runs every lab's jobs on one cluster of every lab's nodes under
// the first lab's policy.
func (fed *Federation) merged(ctx context.Context, cats testbed.TypedCatalog, wls []workload.Workload, opt Options) (*ModeReport, error) {
	nodes := 0
	all := workload.Workload{Name: "merged"}
	for i, lab := range fed.Labs {
		nodes += len(lab.Nodes)
		all.Jobs = append(all.Jobs, wls[i].Jobs...)
	}
	name := fed.Labs[0].Policy
	pol, _ := opt.NewPolicy(name)
	res, err := sim.RunTyped(ctx, fed.config(nodes, opt.Seed), cats, all, pol, sim.ModeFor(name), progress(opt, "merged"))
	if err != nil {
		return nil, fmt.Errorf("merged: %w", err)
	}
	m := &ModeReport{Labs: map[string]*LabReport{}, Rounds: res.Rounds}
	for _, lab := range fed.Labs {
		var jobs []sim.JobResult
		for _, j := range res.Jobs {
			if strings.HasPrefix(j.Name, lab.Name+"/") {
				jobs = append(jobs, j)
			}
		}
		m.Labs[lab.Name] = labReport(lab.GPUs(), jobs)
	}
	m.finish()
	return m, nil
}
