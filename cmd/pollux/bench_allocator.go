package main

import (
	"embed"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/testbed/allocbench"
)

func init() {
	benchCommands = append(benchCommands, newBenchAllocatorCmd)
}

func newBenchAllocatorCmd() *cobra.Command {
	var (
		o         allocbench.Options
		sia       allocbench.SiaSweepOptions
		siaScales string
		snapshots string
		seeds     int
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "allocator",
		Short: "Time Pollux allocation rounds on a synthetic cluster, or check them on the artifact's snapshots",
		Long:  longHelp("bench-allocator", false),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case siaScales != "":
				sia.JSON = asJSON
				return allocbench.RunSiaScale(cmd.Context(), siaScales, sia, cmd.OutOrStdout(), cmd.ErrOrStderr())
			case sia.Out != "":
				return usage.Errorf("--out needs --sia-scale")
			case snapshots != "":
				return allocbench.Snapshots(cmd.OutOrStdout(), snapshots, seeds, asJSON)
			}
			rep, err := allocbench.Synthetic(o)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rep)
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.GPUs, "gpus", 0, "GPUs of the synthetic cluster")
	f.IntVar(&o.GPUsPerNode, "gpus-per-node", 0, "GPUs per node (default 4 up to 2048 GPUs, 8 above)")
	f.IntVar(&o.Jobs, "jobs", 0, "active jobs (default gpus/2)")
	f.IntVar(&o.Rounds, "rounds", 5, "warm-started rounds to time")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the synthetic cluster and of the first round")
	f.BoolVar(&o.Compare, "compare", false, "also run the reference-shaped GA and the greedy baseline on the first round")
	f.IntVar(&o.Racks, "racks", 1, "racks of consecutive nodes (synthetic mode)")
	f.Float64Var(&o.CrossRackRatio, "cross-rack-ratio", 2, "with --racks: the synthetic jobs' cross-rack term, a synchronisation across two racks adding ratio - 1 times their inter-node latency term")
	f.BoolVar(&o.CompareFlat, "compare-flat", false, "time the search rack by rack and the flat search, each over its own rounds (needs --racks)")
	f.StringVar(&snapshots, "snapshots", "", "directory of artifact snapshots (snapshot mode)")
	f.IntVar(&seeds, "seeds", 5, "seeds per snapshot (snapshot mode)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	f.StringVar(&siaScales, "sia-scale", "", "Sia-scale mode: replay Sia's workloads/scale/scale_Nx on its heterogeneous cluster N times larger and time every round (N in 1..64; a list such as 1,2,4,8,16,32 of powers of two up to 32 runs the sweep)")
	f.StringVar(&sia.Out, "out", "", "with --sia-scale: write scale-round-time.png, .json and .csv of the sweep into this directory")
	f.StringVar(&sia.Dir, "sia-artifact", "../shared/sia-artifact", "Sia's artifact directory (Sia-scale mode)")
	f.StringVar(&sia.Policies, "policy", "sia,pollux-het", "policies to time (Sia-scale mode)")
	f.StringVar(&sia.Workload, "workload", "workload-1", "which workload of the scale directory (Sia-scale mode)")
	f.IntVar(&sia.MaxRounds, "max-rounds", 0, "stop each replay after this many rounds (0: run to completion; Sia-scale mode)")
	return cmd
}

// writeJSON writes v as indented JSON, as every --json of the commands
// prints it.
func writeJSON(w io.Writer, v any) error { return jsonout.Write(w, v) }

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

// refuseFlags refuses, as bad input, the first of names given on cmd's
// command line, with format (one %s: the flag's name) saying why.
func refuseFlags(cmd *cobra.Command, format string, names ...string) error {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return usage.Wrap(fmt.Errorf(format, n))
		}
	}
	return nil
}
