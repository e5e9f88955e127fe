package tracefit

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"pollux/internal/usage"
	"pollux/optimizer/goodput"
	"pollux/testbed/trace"
)

// Report is how well the throughput model fits one application: its
// line of `pollux fit --json`.
type Report struct {
	Params     goodput.Params `json:"params"`
	Points     int            `json:"points"`
	MeanRelErr float64        `json:"mean_rel_err"`
	MaxRelErr  float64        `json:"max_rel_err"`
	LOOMeanErr float64        `json:"loo_mean_rel_err"`
}

// Apps fits every application directory under dir (those holding a
// placements.csv), with the leave-one-out error, a line on progress as
// each starts.
func Apps(dir string, workers int, progress io.Writer) (map[string]Report, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, usage.Errorf("fit: %w", err)
	}
	var names []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "placements.csv")); err == nil {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, usage.Errorf("fit: %s holds no <app>/placements.csv", dir)
	}
	sort.Strings(names)
	out := map[string]Report{}
	for _, name := range names {
		fmt.Fprintf(progress, "fitting %s...\n", name)
		r, err := App(filepath.Join(dir, name), workers, true)
		if err != nil {
			return nil, err
		}
		out[name] = r
	}
	return out, nil
}

// App fits one application directory; loo adds the leave-one-placement-out
// error (one fit per placement).
func App(dir string, workers int, loo bool) (Report, error) {
	rows, err := trace.LoadMeasured(dir)
	if err != nil {
		return Report{}, usage.Errorf("fit: %w", err)
	}
	points := make([]goodput.ProfilePoint, len(rows))
	groups := make([]string, len(rows))
	for i, r := range rows {
		points[i], groups[i] = r.ProfilePoint, r.Placement
	}
	params, err := goodput.Fit(points)
	if err != nil {
		return Report{}, fmt.Errorf("fit: %s: %w", dir, err)
	}
	r := Report{Params: params, Points: len(points)}
	r.MeanRelErr, r.MaxRelErr = goodput.StepTimeErrors(params, points)
	if loo {
		if r.LOOMeanErr, err = goodput.LeaveOneGroupOut(points, groups, workers); err != nil {
			return Report{}, fmt.Errorf("fit: %s: %w", dir, err)
		}
	}
	return r, nil
}

// WriteTable prints the reports of apps as a table, by name.
func WriteTable(w io.Writer, apps map[string]Report) error {
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
