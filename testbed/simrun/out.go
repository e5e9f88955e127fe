package simrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"pollux/internal/jsonout"
	"pollux/testbed/fabric"
	"pollux/testbed/report"
	"pollux/testbed/sim"
)

// writeSimOut writes summary.json, jobs.csv, the plots (for a sweep, its
// average JCTs beside refs too) and index.html (a page comparing the
// policies, the plots embedded) into dir.
func writeSimOut(dir string, summary report.Summary, results []*sim.Result, refs []report.RefPoint) error {
	if err := writeSummaryAndJobs(dir, summary, results); err != nil {
		return err
	}
	sweep, err := report.WriteSweepPlot(dir, summary, refs)
	if err != nil {
		return errors.Join(fmt.Errorf("sim: sweep plot"), err)
	}
	files, err := report.WritePlots(dir, results)
	if err != nil {
		return errors.Join(fmt.Errorf("sim: plots"), err)
	}
	files = append(sweep, files...)
	var policies, workloads []string
	for _, r := range summary.Runs {
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	note := fmt.Sprintf("pollux sim: %d runs, policies %s on workloads %s.", len(summary.Runs), strings.Join(policies, ", "), strings.Join(workloads, ", "))
	page := report.Page{Title: "Pollux simulator: policies compared", Note: note, Tables: report.SummaryTables(summary), Plots: report.Plots(files)}
	if err := report.WriteIndex(dir, page); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// writeSummaryAndJobs writes summary (as summary.json) and the jobs of
// results (as jobs.csv) into dir: what every `pollux sim --out` writes.
func writeSummaryAndJobs(dir string, summary any, results []*sim.Result) error {
	data, err := json.MarshalIndent(summary, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	fh, err := os.Create(filepath.Join(dir, "jobs.csv"))
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := report.WriteJobsCSV(fh, results); err != nil {
		fh.Close()
		return fmt.Errorf("sim: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// topologyComparison is what `pollux sim --compare-topology --json`
// prints: the policy aware of the racks and blind to them, each averaged
// over the workloads, on the network of Oversubscription and
// NodeBandwidthGbps.
type topologyComparison struct {
	Policy            string               `json:"policy"`
	Racks             int                  `json:"racks"`
	Oversubscription  float64              `json:"oversubscription"`
	NodeBandwidthGbps float64              `json:"node_bandwidth_gbps"`
	Workloads         int                  `json:"workloads"`
	RackAware         report.PolicySummary `json:"rack_aware"`
	RackBlind         report.PolicySummary `json:"rack_blind"`
	// AvgJCTReduction is 1 - rack-aware mean average JCT / rack-blind's.
	AvgJCTReduction float64 `json:"avg_jct_reduction"`
	// Applications are, per application, the cross-rack terms the
	// rack-aware runs' jobs fitted beside what the network added.
	Applications map[string]crossRackFit `json:"applications"`
	// Runs are the per-workload figures, rack-aware then rack-blind.
	Runs []topologyRun `json:"runs"`
}

// crossRackFit is one application's cross-rack term over the rack-aware
// runs' jobs that fitted one: the mean fitted (the seconds they expect a
// synchronisation across two racks to add) and the mean true (what the
// network added to their synchronised steps, per goodput.RackShare,
// averaged over the time each trained across racks).
type crossRackFit struct {
	Jobs        int     `json:"jobs"`
	FittedS     float64 `json:"fitted_cross_rack_s"`
	TrueS       float64 `json:"true_cross_rack_s"`
	MeanAbsErrS float64 `json:"mean_abs_error_s"`
}

// crossRackFits averages the fitted and true cross-rack terms of the
// jobs of results by application.
func crossRackFits(results []*sim.Result) map[string]crossRackFit {
	out := map[string]crossRackFit{}
	for _, r := range results {
		for _, j := range r.Jobs {
			if j.FittedCrossRack == 0 {
				continue
			}
			f := out[j.App]
			f.Jobs++
			f.FittedS += j.FittedCrossRack
			f.TrueS += j.TrueCrossRack
			f.MeanAbsErrS += math.Abs(j.FittedCrossRack - j.TrueCrossRack)
			out[j.App] = f
		}
	}
	for app, f := range out {
		n := float64(f.Jobs)
		f.FittedS, f.TrueS, f.MeanAbsErrS = f.FittedS/n, f.TrueS/n, f.MeanAbsErrS/n
		out[app] = f
	}
	return out
}

type topologyRun struct {
	Workload             string  `json:"workload"`
	RackAware            bool    `json:"rack_aware"`
	AvgJCT               float64 `json:"avg_jct"`
	CrossRackGPUTimeFrac float64 `json:"cross_rack_gpu_time_frac"`
	RestartsPerJob       float64 `json:"restarts_per_job"`
}

// writeTopologyComparison reports the runs of --compare-topology.
func writeTopologyComparison(w io.Writer, o Options, runs []runSpec, results []*sim.Result) error {
	var aware, blind []*sim.Result
	bw := o.NodeBandwidth
	if bw == 0 {
		bw = fabric.DefaultNodeBandwidth * 8 / 1e9
	}
	out := topologyComparison{Policy: runs[0].policy, Racks: o.Racks, Oversubscription: o.Oversubscription, NodeBandwidthGbps: bw}
	for i, r := range runs {
		if r.blind {
			blind = append(blind, results[i])
		} else {
			aware = append(aware, results[i])
		}
		m := results[i].Metrics
		out.Runs = append(out.Runs, topologyRun{Workload: r.wl.Name, RackAware: !r.blind, AvgJCT: m.AvgJCT,
			CrossRackGPUTimeFrac: m.CrossRackGPUTimeFrac, RestartsPerJob: m.RestartsPerJob})
	}
	out.RackAware = report.Summarize(aware).Policies[out.Policy]
	out.RackBlind = report.Summarize(blind).Policies[out.Policy]
	out.Workloads = len(aware)
	out.Applications = crossRackFits(aware)
	if out.RackBlind.MeanAvgJCT > 0 {
		out.AvgJCTReduction = 1 - out.RackAware.MeanAvgJCT/out.RackBlind.MeanAvgJCT
	}
	if o.JSON {
		return jsonout.Write(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s on %d racks, oversubscription %g\tmean avg JCT s\tcross-rack GPU time\trestarts/job\t\n", out.Policy, out.Racks, out.Oversubscription)
	for _, row := range []struct {
		name string
		ps   report.PolicySummary
	}{{"rack-aware", out.RackAware}, {"rack-blind", out.RackBlind}} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f %%\t%.2f\t\n", row.name, row.ps.MeanAvgJCT, 100*row.ps.CrossRackGPUTimeFrac, row.ps.MeanRestartsPerJob)
	}
	fmt.Fprintf(tw, "rack-aware below rack-blind\t%.1f %%\t\t\t\n", 100*out.AvgJCTReduction)
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "application\tjobs\tfitted cross-rack s\ttrue s\t\n")
	for _, app := range slices.Sorted(maps.Keys(out.Applications)) {
		f := out.Applications[app]
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t\n", app, f.Jobs, f.FittedS, f.TrueS)
	}
	return tw.Flush()
}
