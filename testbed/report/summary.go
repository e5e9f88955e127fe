package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	"pollux/testbed/sim"
)

// RunSummary is one run's line of the summary.
type RunSummary struct {
	Policy   string `json:"policy"`
	Workload string `json:"workload"`
	sim.Metrics
	Rounds int `json:"rounds"`
}

// PolicySummary averages a policy's runs over workloads.
type PolicySummary struct {
	// MeanAvgJCT is the mean over workloads of each workload's average
	// JCT; the other means are likewise over workloads.
	MeanAvgJCT         float64 `json:"mean_avg_jct"`
	MeanP99JCT         float64 `json:"mean_p99_jct"`
	MeanMakespan       float64 `json:"mean_makespan"`
	MeanRestartsPerJob float64 `json:"mean_restarts_per_job"`
	MeanGPUHours       float64 `json:"mean_gpu_hours"`
	WorstFTF           float64 `json:"worst_ftf"`
	Workloads          int     `json:"workloads"`
	// The figures of Sia's comparison, in hours, each the mean over
	// workloads of the workload's figure (WorstFTF is the worst over all
	// jobs, UnfairFrac the fraction of all jobs with a ratio above 1).
	AvgJCTH        float64 `json:"avg_jct_h"`
	P99JCTH        float64 `json:"p99_jct_h"`
	MakespanH      float64 `json:"makespan_h"`
	GPUHPerJob     float64 `json:"gpu_h_per_job"`
	RestartsPerJob float64 `json:"restarts_per_job"`
	UnfairFrac     float64 `json:"unfair_frac"`
	Contention     float64 `json:"contention"`
	// CrossRackGPUTimeFrac is the mean over workloads of the fraction of
	// allocated GPU time spent on placements across racks.
	CrossRackGPUTimeFrac float64 `json:"cross_rack_gpu_time_frac"`
	jobs                 int
	// ReductionVs is, for Pollux, 1 - its MeanAvgJCT / the baseline's, per
	// baseline present.
	ReductionVs map[string]float64 `json:"avg_jct_reduction_vs,omitempty"`
}

// Summary is the whole result of `pollux sim`.
type Summary struct {
	Runs     []RunSummary             `json:"runs"`
	Policies map[string]PolicySummary `json:"policies"`
}

// Summarize builds the summary of results, runs ordered by policy then
// workload as given.
func Summarize(results []*sim.Result) Summary {
	s := Summary{Runs: []RunSummary{}, Policies: map[string]PolicySummary{}}
	for _, r := range results {
		s.Runs = append(s.Runs, RunSummary{Policy: r.Policy, Workload: r.Workload, Metrics: r.Metrics, Rounds: r.Rounds})
		ps := s.Policies[r.Policy]
		m := r.Metrics
		ps.MeanAvgJCT += m.AvgJCT
		ps.MeanP99JCT += m.P99JCT
		ps.MeanMakespan += m.Makespan
		ps.MeanRestartsPerJob += m.RestartsPerJob
		ps.MeanGPUHours += m.GPUHours
		ps.WorstFTF = max(ps.WorstFTF, m.WorstFTF)
		ps.Workloads++
		ps.GPUHPerJob += m.GPUHoursPerJob
		ps.UnfairFrac += m.UnfairFrac * float64(m.Jobs)
		ps.Contention += m.Contention
		ps.CrossRackGPUTimeFrac += m.CrossRackGPUTimeFrac
		ps.jobs += m.Jobs
		s.Policies[r.Policy] = ps
	}
	for name, ps := range s.Policies {
		n := float64(ps.Workloads)
		ps.MeanAvgJCT /= n
		ps.MeanP99JCT /= n
		ps.MeanMakespan /= n
		ps.MeanRestartsPerJob /= n
		ps.MeanGPUHours /= n
		ps.AvgJCTH = ps.MeanAvgJCT / 3600
		ps.P99JCTH = ps.MeanP99JCT / 3600
		ps.MakespanH = ps.MeanMakespan / 3600
		ps.GPUHPerJob /= n
		ps.RestartsPerJob = ps.MeanRestartsPerJob
		ps.Contention /= n
		ps.CrossRackGPUTimeFrac /= n
		if ps.jobs > 0 {
			ps.UnfairFrac /= float64(ps.jobs)
		}
		s.Policies[name] = ps
	}
	if p, ok := s.Policies["pollux"]; ok {
		for name, b := range s.Policies {
			if name == "pollux" || !(b.MeanAvgJCT > 0) {
				continue
			}
			if p.ReductionVs == nil {
				p.ReductionVs = map[string]float64{}
			}
			p.ReductionVs[name] = 1 - p.MeanAvgJCT/b.MeanAvgJCT
		}
		s.Policies["pollux"] = p
	}
	return s
}

// policyNames lists the summary's policies, Pollux first then by name.
func (s Summary) policyNames() []string {
	names := make([]string, 0, len(s.Policies))
	for n := range s.Policies {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == "pollux") != (names[j] == "pollux") {
			return names[i] == "pollux"
		}
		return names[i] < names[j]
	})
	return names
}

// PrintTable writes the human-readable summary: one line per run, then the
// per-policy means side by side and Pollux's reductions.
func PrintTable(w io.Writer, s Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tworkload\tjobs\tavg JCT s\tp99 JCT s\tmakespan s\trestarts/job\tGPU-hours\tworst FTF\t")
	for _, r := range s.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.2f\t%.1f\t%.2f\t\n",
			r.Policy, r.Workload, r.Jobs, r.AvgJCT, r.P99JCT, r.Makespan, r.RestartsPerJob, r.GPUHours, r.WorstFTF)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	names := s.policyNames()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "mean over workloads\t")
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t", n)
	}
	fmt.Fprintln(tw)
	rows := []struct {
		label string
		get   func(PolicySummary) string
	}{
		{"avg JCT s", func(p PolicySummary) string { return fmt.Sprintf("%.0f", p.MeanAvgJCT) }},
		{"p99 JCT s", func(p PolicySummary) string { return fmt.Sprintf("%.0f", p.MeanP99JCT) }},
		{"makespan s", func(p PolicySummary) string { return fmt.Sprintf("%.0f", p.MeanMakespan) }},
		{"restarts/job", func(p PolicySummary) string { return fmt.Sprintf("%.2f", p.MeanRestartsPerJob) }},
		{"GPU-hours", func(p PolicySummary) string { return fmt.Sprintf("%.1f", p.MeanGPUHours) }},
		{"worst FTF", func(p PolicySummary) string { return fmt.Sprintf("%.2f", p.WorstFTF) }},
	}
	for _, n := range names {
		if s.Policies[n].CrossRackGPUTimeFrac > 0 {
			rows = append(rows, struct {
				label string
				get   func(PolicySummary) string
			}{"cross-rack GPU time", func(p PolicySummary) string { return fmt.Sprintf("%.1f%%", 100*p.CrossRackGPUTimeFrac) }})
			break
		}
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t", row.label)
		for _, n := range names {
			fmt.Fprintf(tw, "%s\t", row.get(s.Policies[n]))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p, ok := s.Policies["pollux"]; ok {
		for _, n := range names {
			if red, ok := p.ReductionVs[n]; ok {
				fmt.Fprintf(w, "Pollux average JCT vs %s: %.1f%% lower\n", n, 100*red)
			}
		}
	}
	return nil
}

// WriteJobsCSV writes one line per job of every run.
func WriteJobsCSV(w io.Writer, results []*sim.Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "workload", "name", "application", "submit_time", "completion_time", "jct", "restarts", "gpu_seconds", "ftf"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range results {
		for _, j := range r.Jobs {
			_ = cw.Write([]string{r.Policy, r.Workload, j.Name, j.App, f(j.Submit), f(j.Completion), f(j.JCT), strconv.Itoa(j.Restarts), f(j.GPUSeconds), f(j.FTF)})
		}
	}
	cw.Flush()
	return cw.Error()
}
