package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"pollux/optimizer/goodput"
	"pollux/testbed/trace"
)

func init() { subcommands = append(subcommands, newFitCmd) }

// fitReport is one application's line of `pollux fit --json`.
type fitReport struct {
	Params     goodput.Params `json:"params"`
	Points     int            `json:"points"`
	MeanRelErr float64        `json:"mean_rel_err"`
	MaxRelErr  float64        `json:"max_rel_err"`
	LOOMeanErr float64        `json:"loo_mean_rel_err"`
}

func newFitCmd() *cobra.Command {
	var (
		traces  string
		asJSON  bool
		workers int
	)
	cmd := &cobra.Command{
		Use:   "fit --traces DIR",
		Short: "Fit the throughput model of every application in a trace directory and report its errors",
		Long: `fit reads DIR/<app>/placements.csv and scalability.csv for every application
in DIR, fits the seven-parameter throughput model on all measured points and
prints the fitted parameters, the mean and largest relative error of the
predicted step time, and the leave-one-placement-out mean error (fit without
one placement's rows, predict them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if traces == "" {
				return badInput(fmt.Errorf("fit: --traces DIR is required"))
			}
			apps, err := fitApps(traces, workers, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"apps": apps})
			}
			return printFitTable(cmd.OutOrStdout(), apps)
		},
	}
	cmd.Flags().StringVar(&traces, "traces", "", "trace directory in the artifact layout (DIR/<app>/placements.csv, scalability.csv)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	cmd.Flags().IntVar(&workers, "parallel", runtime.GOMAXPROCS(0), "fits to run at once for the leave-one-out error")
	return cmd
}

// fitApps fits every application directory under dir.
func fitApps(dir string, workers int, progress io.Writer) (map[string]fitReport, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, badInput(fmt.Errorf("fit: %w", err))
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "placements.csv")); err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, badInput(fmt.Errorf("fit: %s holds no <app>/placements.csv", dir))
	}
	sort.Strings(names)
	out := map[string]fitReport{}
	for _, name := range names {
		fmt.Fprintf(progress, "fitting %s...\n", name)
		r, err := fitApp(filepath.Join(dir, name), workers, true)
		if err != nil {
			return nil, err
		}
		out[name] = r
	}
	return out, nil
}

// fitApp fits one application directory; loo adds the leave-one-placement-out
// error (one fit per placement).
func fitApp(dir string, workers int, loo bool) (fitReport, error) {
	rows, err := trace.LoadMeasured(dir)
	if err != nil {
		return fitReport{}, badInput(fmt.Errorf("fit: %w", err))
	}
	points := make([]goodput.ProfilePoint, len(rows))
	groups := make([]string, len(rows))
	for i, r := range rows {
		points[i], groups[i] = r.ProfilePoint, r.Placement
	}
	params, err := goodput.Fit(points)
	if err != nil {
		return fitReport{}, fmt.Errorf("fit: %s: %w", dir, err)
	}
	r := fitReport{Params: params, Points: len(points)}
	r.MeanRelErr, r.MaxRelErr = goodput.StepTimeErrors(params, points)
	if loo {
		if r.LOOMeanErr, err = goodput.LeaveOneGroupOut(points, groups, workers); err != nil {
			return fitReport{}, fmt.Errorf("fit: %s: %w", dir, err)
		}
	}
	return r, nil
}

func printFitTable(w io.Writer, apps map[string]fitReport) error {
	names := make([]string, 0, len(apps))
	for n := range apps {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "app\tpoints\talpha_c\tbeta_c\talpha_n\tbeta_n\talpha_r\tbeta_r\tgamma\tmean err\tmax err\tLOO err\t")
	for _, n := range names {
		r := apps[n]
		p := r.Params
		fmt.Fprintf(tw, "%s\t%d\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%.3f\t%.1f%%\t%.1f%%\t%.1f%%\t\n",
			n, r.Points, p.AlphaC, p.BetaC, p.AlphaN, p.BetaN, p.AlphaR, p.BetaR, p.Gamma,
			100*r.MeanRelErr, 100*r.MaxRelErr, 100*r.LOOMeanErr)
	}
	return tw.Flush()
}
