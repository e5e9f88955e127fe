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

// Plot is one image of a report page: its file and caption.
type Plot struct {
	File, Caption string
}

var indexPage = template.Must(template.New("index").Funcs(template.FuncMap{
	"pct": func(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) },
	"f0":  func(v float64) string { return fmt.Sprintf("%.0f", v) },
	"f2":  func(v float64) string { return fmt.Sprintf("%.2f", v) },
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d2330; margin: 24px; max-width: 1200px; }
table { border-collapse: collapse; margin: 8px 0 22px; }
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
<h2>Mean over workloads, per policy</h2>
<table id="policies">
<tr><th>policy</th><th>workloads</th><th>avg JCT s</th><th>p99 JCT s</th><th>makespan s</th><th>restarts/job</th><th>GPU-hours</th><th>worst FTF</th><th>cross-rack GPU time</th><th>Pollux's avg JCT below it</th></tr>
{{range .Policies}}<tr><td>{{.Name}}</td><td>{{.Summary.Workloads}}</td><td>{{f0 .Summary.MeanAvgJCT}}</td><td>{{f0 .Summary.MeanP99JCT}}</td><td>{{f0 .Summary.MeanMakespan}}</td>
<td>{{f2 .Summary.MeanRestartsPerJob}}</td><td>{{printf "%.1f" .Summary.MeanGPUHours}}</td><td>{{f2 .Summary.WorstFTF}}</td><td>{{pct .Summary.CrossRackGPUTimeFrac}}</td><td>{{with .Reduction}}{{.}}{{else}}–{{end}}</td></tr>
{{end}}</table>
<h2>Runs</h2>
<table id="runs">
<tr><th>policy</th><th>workload</th><th>jobs</th><th>avg JCT s</th><th>p99 JCT s</th><th>makespan s</th><th>restarts/job</th><th>GPU-hours</th><th>worst FTF</th></tr>
{{range .Runs}}<tr><td>{{.Policy}}</td><td>{{.Workload}}</td><td>{{.Jobs}}</td><td>{{f0 .AvgJCT}}</td><td>{{f0 .P99JCT}}</td><td>{{f0 .Makespan}}</td><td>{{f2 .RestartsPerJob}}</td><td>{{printf "%.1f" .GPUHours}}</td><td>{{f2 .WorstFTF}}</td></tr>
{{end}}</table>
{{range .Images}}<figure><img alt="{{.Caption}}" src="{{.Data}}"><figcaption>{{.Caption}} ({{.File}})</figcaption></figure>
{{end}}<p class="muted">The same figures are in summary.json and jobs.csv beside this page.</p>
</body>
</html>
`))

type indexPolicy struct {
	Name      string
	Summary   PolicySummary
	Reduction string
}

type indexImage struct {
	File, Caption string
	Data          template.URL
}

// WriteIndex writes dir/index.html: a page that compares the policies of
// s (the per-policy means, Pollux's reductions, every run) and shows the
// plots, each embedded as a data URL, so that the page opens from a file
// on its own. title heads it; note says what was run.
func WriteIndex(dir, title, note string, s Summary, plots []Plot) error {
	data := struct {
		Title, Note string
		Policies    []indexPolicy
		Runs        []RunSummary
		Images      []indexImage
	}{Title: title, Note: note, Runs: s.Runs}
	pollux := s.Policies["pollux"]
	for _, name := range s.policyNames() {
		p := indexPolicy{Name: name, Summary: s.Policies[name]}
		if r, ok := pollux.ReductionVs[name]; ok {
			p.Reduction = fmt.Sprintf("%.1f %%", 100*r)
		}
		data.Policies = append(data.Policies, p)
	}
	for _, p := range plots {
		b, err := os.ReadFile(p.File)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		mime := "image/png"
		if strings.HasSuffix(p.File, ".svg") {
			mime = "image/svg+xml"
		}
		data.Images = append(data.Images, indexImage{File: filepath.Base(p.File), Caption: p.Caption,
			// The bytes are ours, base64-encoded: a data URL of an image.
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

// Captions of the plots WritePlots makes, by file name prefix.
func Caption(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	switch {
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
