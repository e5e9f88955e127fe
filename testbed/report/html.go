package report

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
)

// IndexFile is the page WriteIndex writes.
const IndexFile = "index.html"

// Page is a report page: tables, then plots.
type Page struct {
	// Title heads the page; Note says what was run.
	Title, Note string
	Tables      []Table
	Plots       []Plot
}

// Table is one table of a page: cells as text, the first column a name.
type Table struct {
	ID, Caption string
	Header      []string
	Rows        [][]string
}

// Plot is one image of a page: its file and caption.
type Plot struct {
	File, Caption string
}

var indexPage = template.Must(template.New("index").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330; margin: 24px; }
table { border-collapse: collapse; margin: 8px 0 22px; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 4px 10px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { background: #f0f2f5; }
figure { margin: 18px 0; }
figure img { max-width: 100%; border: 1px solid #e3e6ea; }
figcaption, .muted { color: #6b7280; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="muted">{{.Note}}</p>
{{range .Tables}}<h2>{{.Caption}}</h2>
<table id="{{.ID}}">
<tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}{{range .Images}}<figure><img alt="{{.Caption}}" src="{{.Data}}"><figcaption>{{.Caption}} ({{.File}})</figcaption></figure>
{{end}}<p class="muted">The same figures are in summary.json and jobs.csv beside this page.</p>
</body>
</html>
`))

type indexImage struct {
	File, Caption string
	Data          template.URL
}

// WriteIndex writes dir/index.html: p's tables and its plots, each
// embedded as a data URL, so that the page opens from a file on its own.
func WriteIndex(dir string, p Page) error {
	data := struct {
		Page
		Images []indexImage
	}{Page: p}
	for _, pl := range p.Plots {
		b, err := os.ReadFile(pl.File)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		mime := "image/png"
		if strings.HasSuffix(pl.File, ".svg") {
			mime = "image/svg+xml"
		}
		data.Images = append(data.Images, indexImage{File: filepath.Base(pl.File), Caption: pl.Caption,
			// The bytes are our own plot's, base64-encoded: a data URL
			// of an image.
			Data: template.URL("data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b))})
	}
	var buf bytes.Buffer
	if err := indexPage.Execute(&buf, data); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// SummaryTables are the tables of `pollux sim`'s page: the policies'
// means over workloads with Pollux's reduction of the average JCT against
// each (Pollux first), then every run.
func SummaryTables(s Summary) []Table {
	pol := Table{ID: "policies", Caption: "Mean over workloads, per policy",
		Header: []string{"policy", "workloads", "avg JCT s", "p99 JCT s", "makespan s", "restarts/job", "GPU-hours", "worst FTF",
			"cross-rack GPU time", "Pollux below it (avg JCT)"}}
	pollux := s.Policies["pollux"]
	for _, name := range s.policyNames() {
		p := s.Policies[name]
		red := "–"
		if r, ok := pollux.ReductionVs[name]; ok {
			red = fmt.Sprintf("%.1f %%", 100*r)
		}
		pol.Rows = append(pol.Rows, []string{name, fmt.Sprint(p.Workloads), f0(p.MeanAvgJCT), f0(p.MeanP99JCT), f0(p.MeanMakespan),
			f2(p.MeanRestartsPerJob), fmt.Sprintf("%.1f", p.MeanGPUHours), f2(p.WorstFTF), fmt.Sprintf("%.1f %%", 100*p.CrossRackGPUTimeFrac), red})
	}
	runs := Table{ID: "runs", Caption: "Runs",
		Header: []string{"policy", "workload", "jobs", "avg JCT s", "p99 JCT s", "makespan s", "restarts/job", "GPU-hours", "worst FTF"}}
	for _, r := range s.Runs {
		runs.Rows = append(runs.Rows, []string{r.Policy, r.Workload, fmt.Sprint(r.Jobs), f0(r.AvgJCT), f0(r.P99JCT), f0(r.Makespan),
			f2(r.RestartsPerJob), fmt.Sprintf("%.1f", r.GPUHours), f2(r.WorstFTF)})
	}
	return []Table{pol, runs}
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// Plots are files with their captions.
func Plots(files []string) []Plot {
	var out []Plot
	for _, f := range files {
		out = append(out, Plot{File: f, Caption: Caption(f)})
	}
	return out
}

// Caption is the caption of a plot WritePlots or WriteCloudPlots makes,
// from its file name.
func Caption(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	switch {
	case base == "sweep-avg-jct":
		return "Mean average JCT per sweep point (jobs per hour for rate_R), the artifact's own runs as crosses where measured"
	case base == "jct-cdf":
		return "Job completion times, CDF per policy (all workloads)"
	case strings.HasPrefix(base, "gpus-"):
		return "GPUs in use over time, workload " + strings.TrimPrefix(base, "gpus-")
	case strings.HasPrefix(base, "batch-"):
		return "Mean total batch size of running jobs over time, workload " + strings.TrimPrefix(base, "batch-")
	case strings.HasPrefix(base, "nodes-"):
		return "Nodes paid for over time, workload " + strings.TrimPrefix(base, "nodes-")
	case strings.HasPrefix(base, "efficiency-"):
		return "Mean statistical efficiency of running jobs, workload " + strings.TrimPrefix(base, "efficiency-")
	}
	return base
}
