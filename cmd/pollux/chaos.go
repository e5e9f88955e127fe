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
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"pollux/testbed/chaos/attack"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/netns"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/launch"
)

func init() { subcommands = append(subcommands, newChaosCmd) }

// errChaosFailed is returned when a run lost a job, broke an invariant or
// could not inject or observe what it had to.
var errChaosFailed = errors.New("chaos: the run failed")

func newChaosCmd() *cobra.Command {
	var (
		scenario, dir, logLevel, network, judge string
		seed                                    uint64
		jsonOut                                 bool
		exec                                    []string
		o                                       driver.Options
		leaseTTL                                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Fault injection: run a cluster through a seeded fault schedule and judge it from independent observers",
		Long: "Starts a 3-server, 2-agent cluster of emulated GPUs for each scenario (each process in a network namespace " +
			"of its own when run as root with iptables, else on 127.0.0.1), submits emulated jobs, injects the scenario's " +
			"faults on a schedule drawn from --seed (kill -9 of the leader, a follower, an agent or a worker; SIGSTOP of " +
			"the leader; cold restart; agent restart; the leader isolated, 2/1 and 1/1/1 splits, a non-transitive bridge, " +
			"30 % packet loss, 200 ms latency, then heal; rack-loss runs 3 racks of one server and two agents and kills every process " +
			"of a rack at once, or cuts a rack off), waits until every acknowledged job has finished, stops every " +
			"process, and judges the run from its own client-side history of API operations and the records each worker " +
			"process wrote itself: every job completed, failed, cancelled, lost or unsubmitted; no GPU used twice at once; " +
			"no stale checkpoint restored; completions backed by the workers; the API linearizable (porcupine). Prints a " +
			"table (or, with --json, one object) and exits 1 if anything failed. Scenarios: " + strings.Join(schedule.Names(), ", ") + ". " +
			"--scenario attack instead attacks a secure cluster (every port with wrong or no credentials, forged gossip, " +
			"forbidden jobs, forged worker reports, oversized bodies, slow clients), checks from outside that each attack " +
			"was refused and changed nothing, then that a normal job still completes; with --json it prints " +
			`{"attacks":N,"refused":N,"succeeded":N,"cases":{...}}, and exits 1 if an attack got through. ` +
			"--scenario lab-loss (also run last by all) starts three federated labs (one server and two agents of 2 emulated GPUs each, " +
			"each its own CA), makes one lab (lab-a, lab-b or lab-c by --seed mod 3) borrow a node of one peer and lend one to " +
			"the other, then kills every process of it (servers, agents, the workers on its agents, the borrowing peer's among " +
			"them) while both peers hold leases with it, checks from the peers' /v1/status that their leases with it expired " +
			"within --lease-ttl of the loss and left their ledgers within a federation interval of expiring (lease_expires_max_s, " +
			"lease_held_max_s, lease_expiry_bound_s), restarts it on its data directories, and judges from the labs' APIs and " +
			"the workers' records: every job of the other labs completed (lost_jobs), the borrowing peer's jobs that ran on it " +
			"resumed from their checkpoints (peer_jobs_resumed), the lost lab's unfinished jobs resumed from theirs and " +
			"completed, no worker on a GPU its lab did not lease then and no restore behind a written checkpoint (violations).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenario == "lab-loss" {
				return runLabLossCmd(cmd, labLossOpts{Exec: exec, Dir: dir, Seed: seed, TimeScale: o.TimeScale, TTL: leaseTTL,
					Converge: o.Converge, LogLevel: o.LogLevel}, logLevel, jsonOut)
			}
			if judge != "" {
				return judgeChaos(judge, jsonOut, cmd.OutOrStdout())
			}
			if scenario == "attack" {
				logger, err := chaosLogger(cmd.ErrOrStderr(), logLevel, jsonOut)
				if err != nil {
					return err
				}
				if exec, err = ownExec(exec); err != nil {
					return err
				}
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				return runAttack(ctx, attack.Options{Exec: exec, Dir: dir, TimeScale: o.TimeScale, LogLevel: o.LogLevel,
					Logger: logger}, jsonOut, cmd.OutOrStdout())
			}
			scs, err := schedule.Lookup(scenario)
			if err != nil {
				return badInput(err)
			}
			if o.Logger, err = chaosLogger(cmd.ErrOrStderr(), logLevel, jsonOut); err != nil {
				return err
			}
			switch network {
			case "auto":
				if err := netns.Available(); err != nil {
					o.Logger.Warn("chaos: no network namespaces: network faults are skipped", "why", err)
					o.Network = launch.Loopback
				} else {
					o.Network = launch.Namespaces
				}
			case string(launch.Loopback), string(launch.Namespaces):
				o.Network = launch.Network(network)
			default:
				return badInput(fmt.Errorf("chaos: --network %q (auto, netns or loopback)", network))
			}
			if o.Exec, err = ownExec(exec); err != nil {
				return err
			}
			o.Dir = dir
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var labLoss *labLossOpts
			if scenario == schedule.All {
				labLoss = &labLossOpts{Exec: o.Exec, Seed: seed, TimeScale: 100, TTL: leaseTTL, Converge: o.Converge, LogLevel: o.LogLevel,
					Logger: o.Logger}
				if cmd.Flags().Changed("time-scale") {
					labLoss.TimeScale = o.TimeScale
				}
				if dir != "" {
					labLoss.Dir = filepath.Join(dir, fmt.Sprintf("lab-loss-seed%d", seed))
				}
			}
			return runChaos(ctx, scs, labLoss, seed, o, jsonOut, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "mixed", "scenario to run, or all")
	f.Uint64Var(&seed, "seed", 1, "seed of the fault schedules and the workload")
	f.BoolVar(&jsonOut, "json", false, "print one JSON object instead of a table")
	f.StringVar(&dir, "dir", "", "keep every run's data, logs, history and worker records under this directory (default: a temporary one, removed after a run that passes)")
	f.StringVar(&judge, "judge", "", "judge again the kept run directories under DIR (from --dir) instead of running anything")
	f.StringVar(&network, "network", "auto", "auto (namespaces when possible), netns or loopback; network faults need netns")
	f.StringVar(&logLevel, "log-level", "", "level of the driver's progress log on stderr (default info, warn with --json)")
	f.StringVar(&o.LogLevel, "process-log-level", "warn", "log level of the servers and agents (their logs are kept with --dir)")
	f.Float64Var(&o.TimeScale, "time-scale", 400, "emulated seconds per real second")
	f.DurationVar(&o.Converge, "converge", 120*time.Second, "bound on the wait, after the last fault, until every job has finished")
	f.DurationVar(&leaseTTL, "lease-ttl", 10*time.Second, "lab-loss: the leases' time to live (federation terms lease_ttl_s)")
	f.StringSliceVar(&exec, "exec", nil, "program (and leading arguments) that runs `pollux` (default: this binary)")
	_ = f.MarkHidden("exec")
	return cmd
}

// judgeChaos judges kept run directories again: dir itself if it holds a
// history, else each of its subdirectories that does.
func judgeChaos(dir string, jsonOut bool, w io.Writer) error {
	dirs := []string{dir}
	if _, err := os.Stat(filepath.Join(dir, "history.jsonl")); err != nil {
		matches, _ := filepath.Glob(filepath.Join(dir, "*", "history.jsonl"))
		if len(matches) == 0 {
			return badInput(fmt.Errorf("chaos: --judge %s: no history.jsonl in it or in its subdirectories", dir))
		}
		dirs = dirs[:0]
		for _, m := range matches {
			dirs = append(dirs, filepath.Dir(m))
		}
	}
	var sum *driver.Summary
	for _, d := range dirs {
		res, err := driver.Judge(d)
		if sum == nil {
			seed := uint64(0)
			if res != nil {
				seed = res.Seed
			}
			sum = driver.NewSummary(seed)
		}
		if err != nil {
			sum.Fail(d, err)
			continue
		}
		sum.Add(res)
	}
	return printChaos(sum, jsonOut, w)
}

// runChaos runs the scenarios one after another, each on a fresh
// cluster, and prints the summary.
func runChaos(ctx context.Context, scs []schedule.Scenario, labLoss *labLossOpts, seed uint64, o driver.Options, jsonOut bool, w io.Writer) error {
	sum := driver.NewSummary(seed)
	for _, sc := range scs {
		if sc.Network() && o.Network != launch.Namespaces {
			local := sc.WithoutNetwork()
			if local.Total() == 0 {
				sum.Skip(sc.Name, "network faults need network namespaces (root and iptables)")
				continue
			}
			sum.Skip(sc.Name+" (network faults only)", "network faults need network namespaces (root and iptables)")
			sc = local
		}
		res, err := driver.Run(ctx, sc, seed, o)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("chaos: interrupted: %w", ctx.Err())
			}
			sum.Fail(sc.Name, err)
			o.Logger.Error("chaos: scenario not judged", "scenario", sc.Name, "err", err)
			continue
		}
		sum.Add(res)
		o.Logger.Info("chaos: scenario done", "scenario", sc.Name, "faults", len(res.Faults), "failures", len(res.Failures()),
			"took", res.Elapsed.Round(time.Second), "dir", res.Dir)
		for _, f := range res.Failures() {
			o.Logger.Warn("chaos: failure", "scenario", sc.Name, "failure", f)
		}
	}
	if labLoss != nil {
		res, err := runLabLoss(ctx, *labLoss)
		switch {
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("chaos: interrupted: %w", ctx.Err())
		case err != nil:
			sum.Fail("lab-loss", err)
			o.Logger.Error("chaos: scenario not judged", "scenario", "lab-loss", "err", err)
		default:
			sum.AddJudged(res.summary())
			o.Logger.Info("chaos: scenario done", "scenario", "lab-loss", "failures", len(res.Failures), "took", time.Duration(res.ElapsedS*float64(time.Second)).Round(time.Second), "dir", res.Dir)
			for _, f := range res.Failures {
				o.Logger.Warn("chaos: failure", "scenario", "lab-loss", "failure", f)
			}
		}
	}
	return printChaos(sum, jsonOut, w)
}

// printChaos prints the summary and fails unless every run passed.
func printChaos(sum *driver.Summary, jsonOut bool, w io.Writer) error {
	if jsonOut {
		if err := writeJSON(w, sum); err != nil {
			return err
		}
	} else if err := writeChaosTable(w, sum); err != nil {
		return err
	}
	if !sum.Pass() {
		return fmt.Errorf("%w: %d failures (%d lost, %d unsubmitted, %d failed jobs, %d violations, linearizable %v)", errChaosFailed,
			len(sum.Failures), sum.LostJobs, sum.JobsUnsubmitted, sum.JobsFailed, sum.Violations, sum.Linearizable)
	}
	return nil
}

func writeChaosTable(w io.Writer, s *driver.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tfaults\tjobs\tcompleted\tfailed\tcancelled\tlost\tunsubmitted\tviolations\tlinearizable\tfailover median (s)\tfailover max (s)\tre-placement max (s)\ttook (s)\t")
	row := func(name string, faults, jobs, done, failed, cancelled, lost, unsub, viol int, lin bool, fmed, fmax, rmax, took float64) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%.2f\t%.2f\t%.2f\t%.0f\t\n",
			name, faults, jobs, done, failed, cancelled, lost, unsub, viol, lin, fmed, fmax, rmax, took)
	}
	for _, c := range s.Scenarios {
		row(c.Name, c.Faults, c.JobsSubmitted, c.JobsCompleted, c.JobsFailed, c.JobsCancelled, c.LostJobs, c.JobsUnsubmitted,
			c.Violations, c.Linearizable, c.FailoverMedianS, c.FailoverMaxS, c.ReplacementMaxS, c.ElapsedS)
	}
	row("total", s.Faults, s.JobsSubmitted, s.JobsCompleted, s.JobsFailed, s.JobsCancelled, s.LostJobs, s.JobsUnsubmitted,
		s.Violations, s.Linearizable, s.FailoverMedianS, s.FailoverMaxS, s.ReplacementMaxS, s.ElapsedS)
	if err := tw.Flush(); err != nil {
		return err
	}
	kinds := make([]string, 0, len(s.FaultsByKind))
	for k := range s.FaultsByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, s.FaultsByKind[k]))
	}
	fmt.Fprintf(w, "faults: %d of %d planned injected (%d network, %d partitions): %s\n", s.Faults, s.FaultsPlanned, s.NetworkFaults, s.Partitions, strings.Join(parts, ", "))
	for _, sk := range s.Skipped {
		fmt.Fprintln(w, "skipped:", sk)
	}
	for _, n := range s.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, f := range s.Failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
	return nil
}

// runAttack runs the attack scenario and prints its result; it fails
// unless every attack was refused and a normal job completed after them.
func runAttack(ctx context.Context, o attack.Options, jsonOut bool, w io.Writer) error {
	res, err := attack.Run(ctx, o)
	if res != nil {
		if perr := printAttack(res, jsonOut, w); perr != nil && err == nil {
			err = perr
		}
		if res.After != nil {
			o.Logger.Error("chaos: after the attacks", "err", res.After)
		}
		if res.Dir != "" {
			o.Logger.Warn("chaos: the attack run is kept", "dir", res.Dir)
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", errChaosFailed, err)
	case !res.Pass():
		return fmt.Errorf("%w: %d of %d attacks got through or changed the state; normal job after them: %s", errChaosFailed,
			res.Succeeded, res.Attacks, errOrOK(res.After))
	}
	return nil
}

func errOrOK(err error) string {
	if err == nil {
		return "completed"
	}
	return err.Error()
}

// printAttack prints the attack scenario's result: its JSON, or a table.
func printAttack(res *attack.Result, jsonOut bool, w io.Writer) error {
	if jsonOut {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "attack\trefused\thow")
	names := make([]string, 0, len(res.Cases))
	for name := range res.Cases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := res.Cases[name]
		fmt.Fprintf(tw, "%s\t%t\t%s\n", name, c.Refused, c.How)
	}
	fmt.Fprintf(tw, "\n%d attacks, %d refused, %d succeeded; the normal job after them: %s (%v)\n", res.Attacks, res.Refused,
		res.Succeeded, errOrOK(res.After), res.Elapsed.Round(time.Second))
	return tw.Flush()
}

// chaosLogger is the harness's logger on w: info, or warnings only with
// --json, unless --log-level names another level.
func chaosLogger(w io.Writer, logLevel string, jsonOut bool) (*slog.Logger, error) {
	lvl := slog.LevelInfo
	if jsonOut {
		lvl = slog.LevelWarn
	}
	if err := lvl.UnmarshalText([]byte(logLevel)); logLevel != "" && err != nil {
		return nil, badInput(fmt.Errorf("chaos: --log-level %q: %w", logLevel, err))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// ownExec is exec, or this executable when exec is empty.
func ownExec(exec []string) ([]string, error) {
	if len(exec) > 0 {
		return exec, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("chaos: finding own executable: %w", err)
	}
	return []string{self}, nil
}
