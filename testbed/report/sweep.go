package report

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// RefPoint is a reference figure of a sweep point measured elsewhere (Sia
// artifact's own simulator): a policy's mean average JCT over the
// workloads of the point it ran.
type RefPoint struct {
	Policy    string
	Point     string // the sweep directory, "rate_10"
	AvgJCTH   float64
	Workloads int
}

// sweepNumber reads the number that ends a sweep point's name ("rate_10":
// 10, "scale_4x": 4).
var sweepNumber = regexp.MustCompile(`(\d+)x?$`)

// SweepPoints groups the runs of s by sweep point (the D of workload
// names "D/W"): per policy, the mean average JCT in hours of each point
// over its workloads, keyed by the point's number. ok is false unless
// every workload is in a numbered point and there are two points or more.
func SweepPoints(s Summary) (means map[string]map[float64]float64, names map[float64]string, ok bool) {
	sums := map[string]map[float64][2]float64{}
	names = map[float64]string{}
	for _, r := range s.Runs {
		point, _, found := strings.Cut(r.Workload, "/")
		m := sweepNumber.FindStringSubmatch(point)
		if !found || m == nil {
			return nil, nil, false
		}
		x, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil, nil, false
		}
		names[x] = point
		if sums[r.Policy] == nil {
			sums[r.Policy] = map[float64][2]float64{}
		}
		v := sums[r.Policy][x]
		sums[r.Policy][x] = [2]float64{v[0] + r.AvgJCT/3600, v[1] + 1}
	}
	if len(names) < 2 {
		return nil, nil, false
	}
	means = map[string]map[float64]float64{}
	for p, byX := range sums {
		means[p] = map[float64]float64{}
		for x, v := range byX {
			means[p][x] = v[0] / v[1]
		}
	}
	return means, names, true
}

// WriteSweepPlot writes sweep-avg-jct.png when the runs of s form a sweep
// (SweepPoints): each policy's mean average JCT against the points'
// numbers (jobs per hour for Sia's rate_R workloads), refs as markers
// beside the lines. It returns the files written (none without a sweep).
func WriteSweepPlot(dir string, s Summary, refs []RefPoint) ([]string, error) {
	means, names, ok := SweepPoints(s)
	if !ok {
		return nil, nil
	}
	policies := s.policyNames()
	colour := func(policy string) color.Color {
		if i := slices.Index(policies, policy); i >= 0 {
			return palette[i%len(palette)]
		}
		return color.Black
	}
	p := plot.New()
	p.Title.Text = "Average JCT across the sweep"
	p.X.Label.Text = "sweep point (jobs per hour for rate_R)"
	p.Y.Label.Text = "mean average JCT (h)"
	p.Legend.Top = true
	p.Legend.Left = true
	for _, pol := range policies {
		xs := make([]float64, 0, len(means[pol]))
		for x := range means[pol] {
			xs = append(xs, x)
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, 0, len(xs))
		for _, x := range xs {
			pts = append(pts, plotter.XY{X: x, Y: means[pol][x]})
		}
		if err := addLine(p, pol, pts, colour(pol)); err != nil {
			return nil, err
		}
	}
	byPolicy := map[string]plotter.XYs{}
	var refPolicies []string
	for _, r := range refs {
		for x, name := range names {
			if name == r.Point {
				if _, seen := byPolicy[r.Policy]; !seen {
					refPolicies = append(refPolicies, r.Policy)
				}
				byPolicy[r.Policy] = append(byPolicy[r.Policy], plotter.XY{X: x, Y: r.AvgJCTH})
			}
		}
	}
	for _, pol := range refPolicies {
		sc, err := plotter.NewScatter(byPolicy[pol])
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = colour(pol)
		sc.GlyphStyle.Shape = draw.CrossGlyph{}
		sc.GlyphStyle.Radius = vg.Points(4)
		p.Add(sc)
		p.Legend.Add("artifact "+pol, sc)
	}
	var files []string
	if err := save(p, dir, "sweep-avg-jct.png", &files); err != nil {
		return nil, err
	}
	return files, nil
}

// artifactPolicy names our policy for a policy of Sia's simulator.
var artifactPolicy = map[string]string{"sia": "sia", "pollux": "pollux-unaware"}

// ReadGroundTruth reads the sweep points of a ground-truth file of Sia's
// simulator (testbed/sim/siaref/summarize.py's JSON): per policy and
// point, the mean average JCT over the point's workloads it ran whole
// (SET/POINT/WORKLOAD, CBC-solved where a solver is named), policies
// named as ours (its pollux: pollux-unaware).
func ReadGroundTruth(r io.Reader) ([]RefPoint, error) {
	var doc struct {
		Runs []struct {
			Policy   string   `json:"policy"`
			Workload string   `json:"workload"`
			Solver   *string  `json:"solver"`
			AvgJCTH  *float64 `json:"avg_jct_h"`
		} `json:"runs"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("report: ground truth: %w", err)
	}
	type key struct{ policy, point string }
	sums := map[key][2]float64{}
	var order []key
	for _, run := range doc.Runs {
		parts := strings.Split(run.Workload, "/")
		pol, known := artifactPolicy[run.Policy]
		if !known || len(parts) != 3 || strings.Contains(run.Workload, "@") || run.AvgJCTH == nil ||
			!(*run.AvgJCTH >= 0) || math.IsInf(*run.AvgJCTH, 0) || run.Solver != nil && *run.Solver != "cbc" {
			continue
		}
		k := key{pol, parts[1]}
		if _, seen := sums[k]; !seen {
			order = append(order, k)
		}
		v := sums[k]
		sums[k] = [2]float64{v[0] + *run.AvgJCTH, v[1] + 1}
	}
	out := make([]RefPoint, 0, len(order))
	for _, k := range order {
		v := sums[k]
		out = append(out, RefPoint{Policy: k.policy, Point: k.point, AvgJCTH: v[0] / v[1], Workloads: int(v[1])})
	}
	return out, nil
}
