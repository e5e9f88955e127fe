package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"pollux/internal/jsonout"
	"pollux/internal/usage"
	"pollux/testbed/chaos/driver"
	"pollux/testbed/chaos/labloss"
	"pollux/testbed/chaos/netns"
	"pollux/testbed/chaos/schedule"
	"pollux/testbed/launch"
)

// ErrFailed is returned when a run lost a job, broke an invariant or
// could not inject or observe what it had to.
var ErrFailed = errors.New("chaos: the run failed")

// Judge judges kept run directories again: dir itself if it holds a
// history, else each of its subdirectories that does; it prints the
// summary.
func Judge(dir string, jsonOut bool, w io.Writer) error {
	dirs := []string{dir}
	if _, err := os.Stat(filepath.Join(dir, "history.jsonl")); err != nil {
		matches, _ := filepath.Glob(filepath.Join(dir, "*", "history.jsonl"))
		if len(matches) == 0 {
			return usage.Errorf("chaos: --judge %s: no history.jsonl in it or in its subdirectories", dir)
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
	return Print(sum, jsonOut, w)
}

// noNetns is why a run without network namespaces skips network faults.
const noNetns = "network faults need network namespaces (root and iptables)"

// Run runs the scenarios one after another, each on a fresh cluster,
// then, when labLoss is not nil, the lab-loss scenario, and prints the
// summary. Without network namespaces the network faults are skipped,
// each listed with why; that fails the run unless it opted out of them
// (optOut: --network loopback).
func Run(ctx context.Context, scs []schedule.Scenario, labLoss *labloss.Options, seed uint64, o driver.Options, optOut bool, jsonOut bool, w io.Writer) error {
	sum := driver.NewSummary(seed)
	for _, sc := range scs {
		if sc.Network() && o.Network != launch.Namespaces {
			local := sc.WithoutNetwork()
			for _, c := range sc.Counts {
				if c.N > 0 && c.Kind.Network() {
					sum.SkipFaults(sc.Name, string(c.Kind), c.N, noNetns, !optOut)
				}
			}
			if local.Total() == 0 {
				sum.Skip(sc.Name, noNetns)
				continue
			}
			sum.Skip(sc.Name+" (network faults only)", noNetns)
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
		if err := addLabLoss(ctx, sum, *labLoss, o); err != nil {
			return err
		}
	}
	return Print(sum, jsonOut, w)
}

// addLabLoss runs the lab-loss scenario and adds its line to sum.
func addLabLoss(ctx context.Context, sum *driver.Summary, lo labloss.Options, o driver.Options) error {
	res, err := labloss.Run(ctx, lo)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("chaos: interrupted: %w", ctx.Err())
	case err != nil:
		sum.Fail("lab-loss", err)
		o.Logger.Error("chaos: scenario not judged", "scenario", "lab-loss", "err", err)
	default:
		sum.AddJudged(res.Summary())
		o.Logger.Info("chaos: scenario done", "scenario", "lab-loss", "failures", len(res.Failures), "took",
			time.Duration(res.ElapsedS*float64(time.Second)).Round(time.Second), "dir", res.Dir)
		for _, f := range res.Failures {
			o.Logger.Warn("chaos: failure", "scenario", "lab-loss", "failure", f)
		}
	}
	return nil
}

// Print prints the summary and fails unless every run passed.
func Print(sum *driver.Summary, jsonOut bool, w io.Writer) error {
	if jsonOut {
		if err := jsonout.Write(w, sum); err != nil {
			return err
		}
	} else if err := writeTable(w, sum); err != nil {
		return err
	}
	if !sum.Pass() {
		return fmt.Errorf("%w: %d failures (%d lost, %d unsubmitted, %d failed jobs, %d violations, linearizable %v, %d of %d faults not injected)", ErrFailed,
			len(sum.Failures), sum.LostJobs, sum.JobsUnsubmitted, sum.JobsFailed, sum.Violations, sum.Linearizable, sum.FaultsSkipped, sum.FaultsPlanned)
	}
	return nil
}

func writeTable(w io.Writer, s *driver.Summary) error {
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
	fmt.Fprintf(w, "faults: %d of %d planned injected, %d skipped (%d network, %d partitions): %s\n", s.FaultsInjected, s.FaultsPlanned,
		s.FaultsSkipped, s.NetworkFaults, s.Partitions, strings.Join(parts, ", "))
	for _, sk := range s.Skipped {
		fmt.Fprintln(w, "skipped:", sk)
	}
	for _, sk := range s.SkippedFaults {
		fmt.Fprintln(w, "fault skipped:", sk)
	}
	for _, n := range s.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, f := range s.Failures {
		fmt.Fprintln(w, "FAIL:", f)
	}
	return nil
}

// Network is the network that network (a --network value) asks for: with
// "auto", network namespaces when this machine has them (log says why
// not).
func Network(network string, log *slog.Logger) (launch.Network, error) {
	switch network {
	case "auto":
		if err := netns.Available(); err != nil {
			log.Warn("chaos: no network namespaces: network faults are skipped, which fails the run (--network loopback opts out)", "why", err)
			return launch.Loopback, nil
		}
		return launch.Namespaces, nil
	case string(launch.Loopback), string(launch.Namespaces):
		return launch.Network(network), nil
	}
	return "", usage.Errorf("chaos: --network %q (auto, netns or loopback)", network)
}
