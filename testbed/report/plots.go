package report

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"pollux/testbed/sim"
)

// palette colours policies consistently across plots.
var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// WritePlots writes jct-cdf.png (the CDF of JCTs per policy, all workloads
// pooled) and, per workload, gpus-<workload>.png and batch-<workload>.png
// (GPUs in use and mean total batch size over time, one line per policy).
// It returns the files written.
func WritePlots(dir string, results []*sim.Result) ([]string, error) {
	var policies, workloads []string
	seenP, seenW := map[string]bool{}, map[string]bool{}
	jcts := map[string][]float64{}
	for _, r := range results {
		if !seenP[r.Policy] {
			seenP[r.Policy] = true
			policies = append(policies, r.Policy)
		}
		if !seenW[r.Workload] {
			seenW[r.Workload] = true
			workloads = append(workloads, r.Workload)
		}
		for _, j := range r.Jobs {
			jcts[r.Policy] = append(jcts[r.Policy], j.JCT)
		}
	}
	colour := func(policy string) color.Color {
		for i, p := range policies {
			if p == policy {
				return palette[i%len(palette)]
			}
		}
		return palette[0]
	}
	var files []string
	p := plot.New()
	p.Title.Text = "Job completion time CDF"
	p.X.Label.Text = "JCT (s, log scale)"
	p.Y.Label.Text = "fraction of jobs"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{}
	p.Legend.Top = false
	p.Legend.Left = false
	for _, pol := range policies {
		xs := append([]float64(nil), jcts[pol]...)
		sort.Float64s(xs)
		pts := make(plotter.XYs, 0, len(xs))
		for i, x := range xs {
			pts = append(pts, plotter.XY{X: max(x, 1), Y: float64(i+1) / float64(len(xs))})
		}
		if err := addLine(p, pol, pts, colour(pol)); err != nil {
			return nil, err
		}
	}
	if err := save(p, dir, "jct-cdf.png", &files); err != nil {
		return nil, err
	}
	for _, wl := range workloads {
		gp, bp := plot.New(), plot.New()
		gp.Title.Text = "GPUs in use, " + wl
		gp.X.Label.Text, gp.Y.Label.Text = "time (h)", "GPUs allocated"
		bp.Title.Text = "Mean batch size, " + wl
		bp.X.Label.Text, bp.Y.Label.Text = "time (h)", "mean total batch of running jobs"
		for _, r := range results {
			if r.Workload != wl {
				continue
			}
			g := make(plotter.XYs, len(r.Timeline))
			b := make(plotter.XYs, len(r.Timeline))
			for i, s := range r.Timeline {
				g[i] = plotter.XY{X: s.Time / 3600, Y: float64(s.GPUs)}
				b[i] = plotter.XY{X: s.Time / 3600, Y: s.MeanBatch}
			}
			if err := addLine(gp, r.Policy, g, colour(r.Policy)); err != nil {
				return nil, err
			}
			if err := addLine(bp, r.Policy, b, colour(r.Policy)); err != nil {
				return nil, err
			}
		}
		if err := save(gp, dir, "gpus-"+wl+".png", &files); err != nil {
			return nil, err
		}
		if err := save(bp, dir, "batch-"+wl+".png", &files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func addLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("report: %s: %w", name, err)
	}
	l.Color = c
	l.Width = vg.Points(1.2)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// save writes p as dir/name, a "/" in name (a workload of a sweep,
// "rate_10/workload-1") written as "_".
func save(p *plot.Plot, dir, name string, files *[]string) error {
	path := filepath.Join(dir, strings.ReplaceAll(name, "/", "_"))
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	*files = append(*files, path)
	return nil
}

// WriteCloudPlots writes, per workload of elastic-cluster runs,
// nodes-<workload>.png (the nodes paid for over time, one line per policy)
// and efficiency-<workload>.png (the mean statistical efficiency of the
// running jobs at their batch size). It returns the files written.
func WriteCloudPlots(dir string, results []*sim.Result) ([]string, error) {
	var policies, workloads []string
	for _, r := range results {
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	var files []string
	for _, wl := range workloads {
		np, ep := plot.New(), plot.New()
		np.Title.Text = "Cluster size, " + wl
		np.X.Label.Text, np.Y.Label.Text = "time (h)", "nodes paid for"
		ep.Title.Text = "Statistical efficiency, " + wl
		ep.X.Label.Text, ep.Y.Label.Text = "time (h)", "mean efficiency of running jobs"
		np.Legend.Left = true
		np.Legend.Top = true
		peak := 1
		for _, r := range results {
			if r.Workload != wl {
				continue
			}
			c := palette[slices.Index(policies, r.Policy)%len(palette)]
			n := make(plotter.XYs, 0, len(r.Timeline)+1)
			e := make(plotter.XYs, 0, len(r.Timeline))
			prev := 0
			if len(r.Timeline) > 0 {
				prev = r.Timeline[0].Nodes
			}
			for _, s := range r.Timeline {
				// A step line: the size changes at the end of a round.
				n = append(n, plotter.XY{X: s.Time / 3600, Y: float64(prev)}, plotter.XY{X: s.Time / 3600, Y: float64(s.Nodes)})
				prev = s.Nodes
				peak = max(peak, s.Nodes)
				if s.Efficiency > 0 {
					e = append(e, plotter.XY{X: s.Time / 3600, Y: s.Efficiency})
				}
			}
			if err := addLine(np, r.Policy, n, c); err != nil {
				return nil, err
			}
			if err := addLine(ep, r.Policy, e, c); err != nil {
				return nil, err
			}
		}
		// Room above the lines for the legend.
		np.Y.Min, np.Y.Max = 0, float64(peak)*1.3
		if err := save(np, dir, "nodes-"+wl+".png", &files); err != nil {
			return nil, err
		}
		if err := save(ep, dir, "efficiency-"+wl+".png", &files); err != nil {
			return nil, err
		}
	}
	return files, nil
}
