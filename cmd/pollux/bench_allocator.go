package main

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/gonum/stat"

	"pollux/optimizer"
	"pollux/optimizer/refsnap"
	"pollux/testbed/badinput"
)

func init() {
	benchCommands = append(benchCommands, newBenchAllocatorCmd)
}

// allocatorReport is what `pollux bench allocator --json` prints in the
// synthetic mode.
type allocatorReport struct {
	GPUs        int     `json:"gpus"`
	GPUsPerNode int     `json:"gpus_per_node"`
	Nodes       int     `json:"nodes"`
	Jobs        int     `json:"jobs"`
	Rounds      int     `json:"rounds"`
	Seed        uint64  `json:"seed"`
	MedianS     float64 `json:"median_round_s"`
	P95S        float64 `json:"p95_round_s"`
	MaxS        float64 `json:"max_round_s"`
	// Fitness is the last round's; FirstFitness the first (cold) round's,
	// CurrentFitness that of the first round's current allocation.
	Fitness        float64 `json:"fitness"`
	FirstFitness   float64 `json:"first_round_fitness"`
	CurrentFitness float64 `json:"current_fitness"`
	Population     int     `json:"population"`
	Generations    int     `json:"generations"`
	Evaluations    int     `json:"evaluations"`
	// With --compare, the baselines on the first round's snapshot.
	Compare *allocatorCompare `json:"compare,omitempty"`
	// Racks and CrossRackRatio describe the topology (--racks);
	// Hierarchical reports that the rounds were searched rack by rack.
	Racks          int     `json:"racks"`
	CrossRackRatio float64 `json:"cross_rack_ratio,omitempty"`
	Hierarchical   bool    `json:"hierarchical"`
	// With --compare-flat, the flat search on the same first snapshot and
	// its own chain of rounds.
	CompareFlat *flatCompare `json:"compare_flat,omitempty"`
}

// flatCompare is the flat search's figures next to the hierarchical ones.
type flatCompare struct {
	MedianS      float64 `json:"median_round_s"`
	P95S         float64 `json:"p95_round_s"`
	MaxS         float64 `json:"max_round_s"`
	Fitness      float64 `json:"fitness"`
	FirstFitness float64 `json:"first_round_fitness"`
	// FitnessRatio is hierarchical / flat fitness (last round),
	// FirstFitnessRatio the same on the first round (the very same
	// snapshot), TimeRatio hierarchical / flat median round time.
	FitnessRatio      float64 `json:"fitness_ratio"`
	FirstFitnessRatio float64 `json:"first_round_fitness_ratio"`
	TimeRatio         float64 `json:"time_ratio"`
}

type allocatorCompare struct {
	ReferenceGAFitness float64 `json:"reference_ga_fitness"`
	ReferenceGAS       float64 `json:"reference_ga_s"`
	GreedyFitness      float64 `json:"greedy_fitness"`
	GreedyS            float64 `json:"greedy_s"`
}

// snapshotResult is one artifact snapshot in `--snapshots` mode.
type snapshotResult struct {
	Jobs             int     `json:"jobs"`
	CurrentFitness   float64 `json:"current_fitness"`
	Fitness          float64 `json:"fitness"`
	RoundS           float64 `json:"round_s"`
	ReferenceCurrent float64 `json:"reference_current_fitness"`
	ReferenceFitness float64 `json:"reference_fitness"`
}

type allocatorOpts struct {
	gpus, perNode, jobs, rounds, seeds int
	seed                               uint64
	snapshots                          string
	compare, asJSON                    bool
	racks                              int
	crossRackRatio                     float64
	compareFlat                        bool
	// Sia-scale mode.
	siaScale                      int
	siaDir, siaPolicies, workload string
	maxRounds                     int
}

func newBenchAllocatorCmd() *cobra.Command {
	var o allocatorOpts
	cmd := &cobra.Command{
		Use:   "allocator",
		Short: "Time Pollux allocation rounds on a synthetic cluster, or check them on the artifact's snapshots",
		Long: `Synthetic mode (--gpus G): builds a seeded cluster of G GPUs on nodes of
--gpus-per-node GPUs (default 4 up to 2048 GPUs, 8 above) with --jobs active
jobs (default G/2) of mixed kinds and sizes, and times --rounds warm-started
rounds (each round starts from the previous round's population, and the
previous round's allocation becomes the current one). --compare also runs
the reference-shaped GA (population 100 x 100 generations on dense
matrices; slow) and the greedy baseline on the first round. --racks R puts
the nodes into R racks of consecutive nodes (--cross-rack-ratio X: a
placement across racks synchronises X times slower); Pollux then searches
rack by rack when the cluster has at least 8 racks and the round at least
128 jobs. --compare-flat times the search rack by rack and the flat
search over the whole cluster, each over its own chain of --rounds rounds
from the same first snapshot.

Sia-scale mode (--sia-scale N): replays Sia's scale workload (every Helios job
issued N times; N = 1 replays the saturn workload itself) on Sia's 64-GPU
heterogeneous cluster with N times the nodes of every GPU type, under each of
--policy, with Sia's simulator semantics and no fairness runs, and reports
the median, p95 and largest wall time of the policy's rounds (Sia's figure
9). Long: at N = 32 (2,048 GPUs, 5,120 jobs) a replay takes minutes.

Snapshot mode (--snapshots DIR): for every snap-*.json of DIR (the Python
artifact's recorded rounds), the fitness our objective gives the current
allocation, the median over --seeds seeds of the fitness our search
reaches from a cold start, and the median round time, next to the
artifact's own figures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.siaScale != 0 {
				return benchSiaScale(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
			}
			if o.snapshots != "" {
				if o.seeds < 1 {
					return badInput(fmt.Errorf("--seeds %d: need at least 1", o.seeds))
				}
				return benchAllocatorSnapshots(cmd.OutOrStdout(), o)
			}
			if o.gpus < 1 {
				return badInput(errors.New("give --gpus G (at least 1) or --snapshots DIR"))
			}
			if o.perNode == 0 {
				o.perNode = 4
				if o.gpus > 2048 {
					o.perNode = 8
				}
			}
			if o.jobs == 0 {
				o.jobs = max(1, o.gpus/2)
			}
			if o.perNode < 1 || o.jobs < 1 || o.rounds < 1 || o.racks < 1 {
				return badInput(fmt.Errorf("--gpus-per-node %d, --jobs %d, --rounds %d, --racks %d: all must be at least 1", o.perNode, o.jobs, o.rounds, o.racks))
			}
			if !(o.crossRackRatio >= 1) || math.IsInf(o.crossRackRatio, 0) {
				return badInput(fmt.Errorf("--cross-rack-ratio %v: want a finite ratio of at least 1", o.crossRackRatio))
			}
			if o.compareFlat && o.racks < 2 {
				return badInput(fmt.Errorf("--compare-flat needs --racks of at least 2"))
			}
			rep, err := benchAllocatorSynthetic(o)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return printAllocator(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.gpus, "gpus", 0, "GPUs of the synthetic cluster")
	f.IntVar(&o.perNode, "gpus-per-node", 0, "GPUs per node (default 4 up to 2048 GPUs, 8 above)")
	f.IntVar(&o.jobs, "jobs", 0, "active jobs (default gpus/2)")
	f.IntVar(&o.rounds, "rounds", 5, "warm-started rounds to time")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic cluster and of the first round")
	f.BoolVar(&o.compare, "compare", false, "also run the reference-shaped GA and the greedy baseline on the first round")
	f.IntVar(&o.racks, "racks", 1, "racks of consecutive nodes (synthetic mode)")
	f.Float64Var(&o.crossRackRatio, "cross-rack-ratio", optimizer.DefaultCrossRackRatio, "how many times slower synchronising across racks is than within one (with --racks)")
	f.BoolVar(&o.compareFlat, "compare-flat", false, "time the search rack by rack and the flat search, each over its own rounds (needs --racks)")
	f.StringVar(&o.snapshots, "snapshots", "", "directory of artifact snapshots (snapshot mode)")
	f.IntVar(&o.seeds, "seeds", 5, "seeds per snapshot (snapshot mode)")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON object on stdout")
	f.IntVar(&o.siaScale, "sia-scale", 0, "Sia-scale mode: replay Sia's workloads/scale/scale_Nx on its heterogeneous cluster N times larger and time every round (N in 1..64)")
	f.StringVar(&o.siaDir, "sia-artifact", "../shared/sia-artifact", "Sia's artifact directory (Sia-scale mode)")
	f.StringVar(&o.siaPolicies, "policy", "sia,pollux-het", "policies to time (Sia-scale mode)")
	f.StringVar(&o.workload, "workload", "workload-1", "which workload of the scale directory (Sia-scale mode)")
	f.IntVar(&o.maxRounds, "max-rounds", 0, "stop each replay after this many rounds (0: run to completion; Sia-scale mode)")
	return cmd
}

// writeJSON writes v as indented JSON, as every --json of the commands
// prints it.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func benchAllocatorSynthetic(o allocatorOpts) (*allocatorReport, error) {
	snap, err := optimizer.Synthetic(o.gpus, o.perNode, o.jobs, o.seed)
	if err != nil {
		return nil, badInput(err)
	}
	rep := &allocatorReport{GPUs: o.gpus, GPUsPerNode: o.perNode, Nodes: len(snap.Nodes), Jobs: o.jobs, Rounds: o.rounds, Seed: o.seed, Racks: o.racks}
	if o.racks > 1 {
		if err := optimizer.AssignRacks(snap, o.racks); err != nil {
			return nil, badInput(fmt.Errorf("--racks: %w", err))
		}
		snap.CrossRackRatio = o.crossRackRatio
		rep.CrossRackRatio = o.crossRackRatio
	}
	first := *snap
	first.Jobs = slices.Clone(snap.Jobs)
	if o.compare {
		rep.Compare = &allocatorCompare{}
		for _, p := range []optimizer.Policy{optimizer.NewRefGA(), optimizer.NewGreedy()} {
			start := time.Now()
			res, err := p.Allocate(snap, nil)
			if err != nil {
				return nil, err
			}
			spent := time.Since(start).Seconds()
			if p.Name() == "greedy" {
				rep.Compare.GreedyFitness, rep.Compare.GreedyS = res.Diagnostics.Fitness, spent
			} else {
				rep.Compare.ReferenceGAFitness, rep.Compare.ReferenceGAS = res.Diagnostics.Fitness, spent
			}
		}
	}
	pol := optimizer.NewPollux()
	if o.compareFlat {
		pol.Hierarchy = optimizer.HierarchyRacks
	}
	rep.Hierarchical = pol.Hierarchical(snap)
	ch, err := runChain(pol, snap, o.seed, o.rounds)
	if err != nil {
		return nil, err
	}
	rep.MedianS, rep.P95S, rep.MaxS = ch.median, ch.p95, ch.max
	rep.FirstFitness, rep.CurrentFitness, rep.Fitness = ch.first.Diagnostics.Fitness, ch.first.Diagnostics.CurrentFitness, ch.last.Diagnostics.Fitness
	rep.Generations, rep.Evaluations, rep.Population = ch.last.Diagnostics.Generations, ch.last.Diagnostics.Evaluations, len(ch.last.State.Population)
	if o.compareFlat {
		flat := optimizer.NewPollux()
		flat.Hierarchy = optimizer.HierarchyFlat
		fc, err := runChain(flat, &first, o.seed, o.rounds)
		if err != nil {
			return nil, err
		}
		rep.CompareFlat = &flatCompare{MedianS: fc.median, P95S: fc.p95, MaxS: fc.max,
			Fitness: fc.last.Diagnostics.Fitness, FirstFitness: fc.first.Diagnostics.Fitness,
			FitnessRatio:      rep.Fitness / fc.last.Diagnostics.Fitness,
			FirstFitnessRatio: rep.FirstFitness / fc.first.Diagnostics.Fitness,
			TimeRatio:         rep.MedianS / fc.median,
		}
	}
	return rep, nil
}

// chain is a run of warm-started rounds: the first and last results and
// the round times' median, p95 and largest.
type chain struct {
	first, last      optimizer.Result
	median, p95, max float64
}

// runChain runs rounds rounds of pol from snap (modified: each round's
// allocation becomes the next one's current allocation), round r with
// seed seed+r, and times them.
func runChain(pol optimizer.Policy, snap *optimizer.Snapshot, seed uint64, rounds int) (chain, error) {
	var ch chain
	var prev *optimizer.State
	times := make([]float64, 0, rounds)
	for r := 0; r < rounds; r++ {
		snap.Seed = seed + uint64(r)
		start := time.Now()
		res, err := pol.Allocate(snap, prev)
		if err != nil {
			return ch, err
		}
		times = append(times, time.Since(start).Seconds())
		if r == 0 {
			ch.first = res
		}
		ch.last = res
		prev = res.State
		advanceRound(snap, res.Placements)
	}
	slices.Sort(times)
	ch.median = stat.Quantile(0.5, stat.Empirical, times, nil)
	ch.p95 = stat.Quantile(0.95, stat.Empirical, times, nil)
	ch.max = times[len(times)-1]
	return ch, nil
}

// advanceRound moves snap one 60 s interval on: the allocation becomes current,
// jobs age and attain service, and moved jobs count a restart.
func advanceRound(snap *optimizer.Snapshot, alloc []optimizer.Placement) {
	const interval = 60.0
	snap.Now += interval
	for j := range snap.Jobs {
		job := &snap.Jobs[j]
		job.Age += interval
		job.Attained += interval * float64(alloc[j].Replicas())
		if !job.Current.Equal(alloc[j]) && len(alloc[j]) > 0 {
			job.Restarts++
		}
		job.Current = alloc[j]
	}
}

func printAllocator(w io.Writer, rep *allocatorReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "GPUs\tnodes\tracks\tjobs\trounds\tsearch\tmedian s\tp95 s\tfitness\tfirst round\tcurrent\n")
	search := "flat"
	if rep.Hierarchical {
		search = "by rack"
	}
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\t%.4f\t%.4f\t%.5f\t%.5f\t%.5f\n", rep.GPUs, rep.Nodes, rep.Racks, rep.Jobs, rep.Rounds,
		search, rep.MedianS, rep.P95S, rep.Fitness, rep.FirstFitness, rep.CurrentFitness)
	if c := rep.CompareFlat; c != nil {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\tflat\t%.4f\t%.4f\t%.5f\t%.5f\t%.5f\n", rep.GPUs, rep.Nodes, rep.Racks, rep.Jobs, rep.Rounds,
			c.MedianS, c.P95S, c.Fitness, c.FirstFitness, rep.CurrentFitness)
	}
	if c := rep.Compare; c != nil {
		fmt.Fprintf(tw, "\nfirst round\tfitness\ttime s\n")
		fmt.Fprintf(tw, "reference GA\t%.5f\t%.3f\n", c.ReferenceGAFitness, c.ReferenceGAS)
		fmt.Fprintf(tw, "greedy\t%.5f\t%.3f\n", c.GreedyFitness, c.GreedyS)
	}
	return tw.Flush()
}

func benchAllocatorSnapshots(w io.Writer, o allocatorOpts) error {
	entries, err := refsnap.LoadDir(o.snapshots)
	if err != nil {
		return badInput(err)
	}
	out := map[string]snapshotResult{}
	for _, e := range entries {
		obj, err := optimizer.NewObjective(e.Snapshot, optimizer.DefaultPowerMean)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
		cur := make([]optimizer.Placement, len(e.Snapshot.Jobs))
		for j := range cur {
			cur[j] = e.Snapshot.Jobs[j].Current
		}
		fits := make([]float64, 0, o.seeds)
		times := make([]float64, 0, o.seeds)
		for s := range o.seeds {
			snap := *e.Snapshot
			snap.Seed = uint64(s)
			start := time.Now()
			res, err := optimizer.NewPollux().Allocate(&snap, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", e.Name, err)
			}
			times = append(times, time.Since(start).Seconds())
			fits = append(fits, res.Diagnostics.Fitness)
		}
		slices.Sort(fits)
		slices.Sort(times)
		out[e.Name] = snapshotResult{
			Jobs:             len(e.Snapshot.Jobs),
			CurrentFitness:   obj.Fitness(cur),
			Fitness:          stat.Quantile(0.5, stat.Empirical, fits, nil),
			RoundS:           stat.Quantile(0.5, stat.Empirical, times, nil),
			ReferenceCurrent: e.Reference.CurrentFitness,
			ReferenceFitness: e.Reference.GAFitnessMed,
		}
	}
	if o.asJSON {
		return writeJSON(w, map[string]any{"snapshots": out})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "snapshot\tjobs\tcurrent\treference current\treference GA\tours\tour round s\n")
	for _, e := range entries {
		r := out[e.Name]
		fmt.Fprintf(tw, "%s\t%d\t%.9f\t%.9f\t%.6f\t%.6f\t%.4f\n", e.Name, r.Jobs, r.CurrentFitness, r.ReferenceCurrent, r.ReferenceFitness, r.Fitness, r.RoundS)
	}
	return tw.Flush()
}

//go:embed help
var helpFiles embed.FS

// longHelp is the long help of a command, help/NAME.txt, its last
// newline dropped, each {{key}} of repl (key, value pairs) replaced, and
// with oneLine its lines joined into one paragraph.
func longHelp(name string, oneLine bool, repl ...string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic(err) // the files are embedded: a missing one is a build mistake
	}
	for i := 0; i+1 < len(repl); i += 2 {
		repl[i] = "{{" + repl[i] + "}}"
	}
	s := strings.NewReplacer(repl...).Replace(strings.TrimSuffix(string(b), "\n"))
	if oneLine {
		s = strings.ReplaceAll(s, "\n", " ")
	}
	return s
}

// usage marks the testbed's bad-input errors as usage errors (exit 2).
func usage(err error) error {
	if badinput.Is(err) {
		return badInput(err)
	}
	return err
}

// refuseFlags refuses, as bad input, the first of names given on cmd's
// command line, with format (one %s: the flag's name) saying why.
func refuseFlags(cmd *cobra.Command, format string, names ...string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return badInput(fmt.Errorf(format, n))
		}
	}
	return nil
}
