package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/schedule"
)

func init() { subcommands = append(subcommands, newChaosCmd) }

// errViolations is returned when a run lost jobs or broke an invariant.
var errViolations = errors.New("chaos: the cluster lost jobs or broke invariants")

func newChaosCmd() *cobra.Command {
	var (
		scenario, dir, logLevel string
		seed                    uint64
		jsonOut                 bool
		exec                    []string
		o                       driver.Options
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Fault injection: run a cluster through a seeded fault schedule and check its history",
		Long: "Starts a 3-server, 2-agent cluster of emulated GPUs on 127.0.0.1 for each scenario, submits emulated " +
			"jobs, injects the scenario's faults on a schedule drawn from --seed (kill -9 of the leader, a follower, " +
			"an agent or a worker; SIGSTOP of the leader beyond the election timeout; cold restart of every server; " +
			"restart of an agent with the same id), waits for every job to complete, stops every process, and checks " +
			"the recorded history: every acknowledged job completed exactly once, no GPU ran two workers at once, " +
			"no stale incarnation reported, committed generations only grew. Prints a table (or, with --json, one " +
			"object) and exits 1 if a job was lost or an invariant broken. Scenarios: " + strings.Join(schedule.Names(), ", ") + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scs, err := schedule.Lookup(scenario)
			if err != nil {
				return badInput(err)
			}
			lvl := slog.LevelInfo
			if jsonOut {
				lvl = slog.LevelWarn
			}
			if err := lvl.UnmarshalText([]byte(logLevel)); logLevel != "" && err != nil {
				return badInput(fmt.Errorf("chaos: --log-level %q: %w", logLevel, err))
			}
			o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			o.Exec = exec
			if len(o.Exec) == 0 {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("chaos: finding own executable: %w", err)
				}
				o.Exec = []string{self}
			}
			o.Dir = dir
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runChaos(ctx, scs, seed, o, jsonOut, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "mixed", "scenario to run, or all")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault schedules and the workload")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object instead of a table")
	f.StringVar(&dir, "dir", "", "keep every run's data, logs and history under this directory (default: a temporary one, removed)")
	f.StringVar(&logLevel, "log-level", "", "level of the driver's progress log on stderr (default info, warn with --json)")
	f.Float64Var(&o.TimeScale, "time-scale", 400, "emulated seconds per real second")
	f.DurationVar(&o.Converge, "converge", 120*time.Second, "bound on the time from the last fault until every job has completed")
	f.StringSliceVar(&exec, "exec", nil, "program (and leading arguments) that runs `pollux` (default: this binary)")
	_ = f.MarkHidden("exec")
	return cmd
}

// chaosReport is the --json output: the figures summed over the
// scenarios, then each scenario's.
type chaosReport struct {
	Seed                 uint64         `json:"seed"`
	Faults               int            `json:"faults"`
	FaultsByKind         map[string]int `json:"faults_by_kind"`
	FaultsSkipped        int            `json:"faults_skipped"`
	JobsSubmitted        int            `json:"jobs_submitted"`
	JobsCompleted        int            `json:"jobs_completed"`
	LostJobs             int            `json:"lost_jobs"`
	Violations           int            `json:"violations"`
	ViolationDetails     []string       `json:"violation_details,omitempty"`
	FailoverMedianS      float64        `json:"failover_median_s"`
	FailoverMaxS         float64        `json:"failover_max_s"`
	FailoversMissing     int            `json:"failovers_missing"`
	ReplaceMedianS       float64        `json:"replace_median_s"`
	ReplaceAfterDeathS   float64        `json:"replace_after_agent_death_s"`
	ReplacementsMissing  int            `json:"replacements_missing"`
	ElapsedS             float64        `json:"elapsed_s"`
	Scenarios            []scenarioJSON `json:"scenarios"`
	failovers, replacing []time.Duration
}

type scenarioJSON struct {
	Name            string  `json:"name"`
	Faults          int     `json:"faults"`
	Skipped         int     `json:"faults_skipped"`
	JobsSubmitted   int     `json:"jobs_submitted"`
	JobsCompleted   int     `json:"jobs_completed"`
	LostJobs        int     `json:"lost_jobs"`
	Violations      int     `json:"violations"`
	FailoverMedianS float64 `json:"failover_median_s"`
	FailoverMaxS    float64 `json:"failover_max_s"`
	ReplaceMaxS     float64 `json:"replace_after_agent_death_s"`
	ElapsedS        float64 `json:"elapsed_s"`
	History         string  `json:"history,omitempty"`
}

// add folds one scenario's result into the report.
func (r *chaosReport) add(res *driver.Result) {
	m := res.Metrics
	r.Faults += m.Faults
	for k, n := range m.ByKind {
		r.FaultsByKind[k] += n
	}
	r.FaultsSkipped += res.Skipped
	r.JobsSubmitted += m.JobsSubmitted
	r.JobsCompleted += m.JobsCompleted
	r.LostJobs += m.Lost
	r.Violations += len(res.Violations)
	for _, v := range res.Violations {
		r.ViolationDetails = append(r.ViolationDetails, res.Scenario+": "+v.String())
	}
	r.FailoversMissing += m.FailoversMissing
	r.ReplacementsMissing += m.ReplacementsMissing
	r.failovers = append(r.failovers, m.Failovers...)
	r.replacing = append(r.replacing, m.Replacements...)
	r.FailoverMedianS, r.FailoverMaxS = median(r.failovers), maxOf(r.failovers)
	r.ReplaceMedianS, r.ReplaceAfterDeathS = median(r.replacing), maxOf(r.replacing)
	r.ElapsedS += res.Elapsed.Seconds()
	r.Scenarios = append(r.Scenarios, scenarioJSON{Name: res.Scenario, Faults: m.Faults, Skipped: res.Skipped,
		JobsSubmitted: m.JobsSubmitted, JobsCompleted: m.JobsCompleted, LostJobs: m.Lost, Violations: len(res.Violations),
		FailoverMedianS: median(m.Failovers), FailoverMaxS: maxOf(m.Failovers), ReplaceMaxS: maxOf(m.Replacements),
		ElapsedS: res.Elapsed.Seconds(), History: res.History})
}

func median(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2].Seconds()
	}
	return (s[n/2-1] + s[n/2]).Seconds() / 2
}

func maxOf(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds).Seconds()
}

// runChaos runs the scenarios one after another, each on a fresh cluster,
// and prints the report.
func runChaos(ctx context.Context, scs []schedule.Scenario, seed uint64, o driver.Options, jsonOut bool, w io.Writer) error {
	rep := chaosReport{Seed: seed, FaultsByKind: map[string]int{}}
	for _, sc := range scs {
		res, err := driver.Run(ctx, sc, seed, o)
		if err != nil {
			return fmt.Errorf("chaos: scenario %s: %w", sc.Name, err)
		}
		rep.add(res)
		if o.Logger != nil {
			o.Logger.Info("chaos: scenario done", "scenario", sc.Name, "faults", res.Metrics.Faults,
				"jobs", res.Metrics.JobsSubmitted, "lost", res.Metrics.Lost, "violations", len(res.Violations),
				"took", res.Elapsed.Round(time.Second))
			for _, v := range res.Violations {
				o.Logger.Warn("chaos: violation", "scenario", sc.Name, "v", v.String())
			}
		}
	}
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := writeChaosTable(w, &rep); err != nil {
		return err
	}
	if rep.LostJobs > 0 || rep.Violations > 0 {
		return fmt.Errorf("%w: %d lost jobs, %d violations", errViolations, rep.LostJobs, rep.Violations)
	}
	return nil
}

func writeChaosTable(w io.Writer, r *chaosReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tfaults\tjobs\tcompleted\tlost\tviolations\tfailover median (s)\tfailover max (s)\treplaced after agent death, max (s)\ttook (s)\t")
	for _, s := range r.Scenarios {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.0f\t\n", s.Name, s.Faults, s.JobsSubmitted, s.JobsCompleted,
			s.LostJobs, s.Violations, s.FailoverMedianS, s.FailoverMaxS, s.ReplaceMaxS, s.ElapsedS)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.0f\t\n", r.Faults, r.JobsSubmitted, r.JobsCompleted,
		r.LostJobs, r.Violations, r.FailoverMedianS, r.FailoverMaxS, r.ReplaceAfterDeathS, r.ElapsedS)
	if err := tw.Flush(); err != nil {
		return err
	}
	kinds := make([]string, 0, len(r.FaultsByKind))
	for k := range r.FaultsByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.FaultsByKind[k]))
	}
	fmt.Fprintf(w, "faults by kind: %s; skipped (no victim) %d; failovers without a new-term commit %d; agent deaths with a job never re-placed %d\n",
		strings.Join(parts, ", "), r.FaultsSkipped, r.FailoversMissing, r.ReplacementsMissing)
	for _, v := range r.ViolationDetails {
		fmt.Fprintln(w, "violation:", v)
	}
	return nil
}
