package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ScalePoint is one policy's round times at one cluster size of the
// scale sweep.
type ScalePoint struct {
	Policy  string
	GPUs    int
	MedianS float64
	P95S    float64
}

// RuntimeRef is a policy runtime Sia's paper reports.
type RuntimeRef struct {
	Policy  string  `json:"policy"` // as the paper names it: sia, pollux, gavel
	GPUs    int     `json:"gpus"`
	Stat    string  `json:"stat"` // median, p95, figure 9 (read off the log plot), text
	Seconds float64 `json:"seconds"`
}

// The kinds of RuntimeRef.Stat besides the names of published.json's
// 64-GPU figures (median, p95).
const (
	StatFigure9 = "figure 9"
	StatText    = "text"
)

// runtimeMention finds, in published.json's sentence on Figure 9, the
// policy names and the runtimes that follow them: "Pollux ~45 s at 256
// GPUs", "~250 s at 1024", "Sia's runtime single-second at 2048".
var runtimeMention = regexp.MustCompile(`(?i)\b(sia|pollux|gavel)\b|~(\d+(?:\.\d+)?) s at (\d+)|single-second at (\d+)`)

// ReadPublishedRuntimes reads the policy runtimes of Sia's artifact's
// published.json: the median and p95 at the heterogeneous cluster's size
// (policy_runtime_64gpu_helios_heterogeneous_s), and the runtimes its
// sentence on Figure 9 (policy_runtime_vs_cluster_size) reads off the log
// plot, each for the policy last named before it ("single-second" taken
// as 1 s). They come sorted by policy, statistic and size.
func ReadPublishedRuntimes(r io.Reader) ([]RuntimeRef, error) {
	var doc struct {
		Cluster struct {
			GPUs int `json:"total_gpus"`
		} `json:"heterogeneous_cluster"`
		Small   map[string]map[string]float64 `json:"policy_runtime_64gpu_helios_heterogeneous_s"`
		Figure9 string                        `json:"policy_runtime_vs_cluster_size"`
	}
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("report: published runtimes: %w", err)
	}
	if doc.Cluster.GPUs <= 0 || len(doc.Small) == 0 {
		return nil, fmt.Errorf("report: published runtimes: %w", errNoRuntimes)
	}
	var refs []RuntimeRef
	for pol, stats := range doc.Small {
		for stat, s := range stats {
			refs = append(refs, RuntimeRef{Policy: strings.ToLower(pol), GPUs: doc.Cluster.GPUs, Stat: stat, Seconds: s})
		}
	}
	policy := ""
	for _, m := range runtimeMention.FindAllStringSubmatch(doc.Figure9, -1) {
		switch {
		case m[1] != "":
			policy = strings.ToLower(m[1])
		case policy == "":
		case m[2] != "":
			s, err1 := strconv.ParseFloat(m[2], 64)
			g, err2 := strconv.Atoi(m[3])
			if err1 == nil && err2 == nil {
				refs = append(refs, RuntimeRef{Policy: policy, GPUs: g, Stat: StatFigure9, Seconds: s})
			}
		default:
			if g, err := strconv.Atoi(m[4]); err == nil {
				refs = append(refs, RuntimeRef{Policy: policy, GPUs: g, Stat: StatText, Seconds: 1})
			}
		}
	}
	refs = slices.DeleteFunc(refs, func(r RuntimeRef) bool {
		return r.Policy == "" || r.Stat == "" || r.GPUs <= 0 || !(r.Seconds > 0) || math.IsInf(r.Seconds, 0)
	})
	slices.SortFunc(refs, func(a, b RuntimeRef) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Stat, b.Stat), cmp.Compare(a.GPUs, b.GPUs))
	})
	return refs, nil
}

// refGlyphs marks each kind of published runtime.
var refGlyphs = map[string]draw.GlyphDrawer{
	"median":    draw.CrossGlyph{},
	"p95":       draw.PlusGlyph{},
	StatFigure9: draw.BoxGlyph{},
	StatText:    draw.TriangleGlyph{},
}

// WriteScalePlot writes scale-round-time.png: each policy's median round
// time (solid line) and p95 (dashed) against the cluster's GPUs, both axes
// logarithmic, and the runtimes Sia's paper reports for Sia and Pollux as
// markers labelled "published" (the paper's Pollux coloured as our
// pollux-unaware), the legend beside the plot. It returns the file
// written.
func WriteScalePlot(dir string, points []ScalePoint, refs []RuntimeRef) ([]string, error) {
	p, leg, _, err := scalePlot(points, refs)
	if err != nil {
		return nil, err
	}
	img := vgimg.New(11*vg.Inch, 5*vg.Inch)
	c := draw.New(img)
	legW := leg.Rectangle(c).Size().X + vg.Points(16)
	p.Draw(draw.Crop(c, 0, -legW, 0, 0))
	leg.Draw(draw.Crop(c, c.Max.X-legW+vg.Points(8), 0, 0, -vg.Points(28)))
	path := filepath.Join(dir, "scale-round-time.png")
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("report: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return []string{path}, nil
}

// scalePlot builds WriteScalePlot's plot and its legend, and returns the
// legend's labels in order.
func scalePlot(points []ScalePoint, refs []RuntimeRef) (*plot.Plot, plot.Legend, []string, error) {
	var policies []string
	for _, pt := range points {
		if !slices.Contains(policies, pt.Policy) {
			policies = append(policies, pt.Policy)
		}
	}
	colour := func(policy string) color.Color {
		if i := slices.Index(policies, policy); i >= 0 {
			return palette[i%len(palette)]
		}
		return color.Gray{Y: 0x60}
	}
	p := plot.New()
	p.Title.Text = "Policy round time against cluster size (Sia's scale workloads)"
	p.X.Label.Text = "GPUs (log scale)"
	p.Y.Label.Text = "round time (s, log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = vg.Points(10)
	leg.Padding = vg.Points(2)
	p.Add(plotter.NewGrid())
	var labels []string
	drawn := 0
	for _, pol := range policies {
		var med, p95 plotter.XYs
		for _, pt := range points {
			if pt.Policy != pol || pt.GPUs <= 0 {
				continue
			}
			if pt.MedianS > 0 {
				med = append(med, plotter.XY{X: float64(pt.GPUs), Y: pt.MedianS})
			}
			if pt.P95S > 0 {
				p95 = append(p95, plotter.XY{X: float64(pt.GPUs), Y: pt.P95S})
			}
		}
		for i, series := range []plotter.XYs{med, p95} {
			if len(series) == 0 {
				continue
			}
			slices.SortFunc(series, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
			l, s, err := plotter.NewLinePoints(series)
			if err != nil {
				return nil, leg, nil, fmt.Errorf("report: %s: %w", pol, err)
			}
			l.Color, s.Color = colour(pol), colour(pol)
			l.Width = vg.Points(1.2)
			label := pol + " median"
			if i == 1 {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				label = pol + " p95"
			}
			p.Add(l, s)
			leg.Add(label, l, s)
			labels = append(labels, label)
			drawn += len(series)
		}
	}
	type group struct{ policy, stat string }
	var groups []group
	byGroup := map[group]plotter.XYs{}
	for _, r := range refs {
		if _, ours := artifactPolicy[r.Policy]; !ours || r.GPUs <= 0 || !(r.Seconds > 0) {
			continue
		}
		g := group{r.Policy, r.Stat}
		if _, seen := byGroup[g]; !seen {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], plotter.XY{X: float64(r.GPUs), Y: r.Seconds})
	}
	for _, g := range groups {
		sc, err := plotter.NewScatter(byGroup[g])
		if err != nil {
			return nil, leg, nil, fmt.Errorf("report: published %s: %w", g.policy, err)
		}
		ours := g.policy
		if a, ok := artifactPolicy[g.policy]; ok {
			ours = a
		}
		sc.GlyphStyle.Color = colour(ours)
		sc.GlyphStyle.Shape = refGlyphs[g.stat]
		if sc.GlyphStyle.Shape == nil {
			sc.GlyphStyle.Shape = draw.RingGlyph{}
		}
		sc.GlyphStyle.Radius = vg.Points(4)
		label := "published " + g.policy + " " + g.stat
		switch g.stat {
		case StatFigure9:
			label += " (read off the plot)"
		case StatText:
			label += " (\"single-second\")"
		}
		p.Add(sc)
		leg.Add(label, sc)
		labels = append(labels, label)
		drawn += len(byGroup[g])
	}
	if drawn == 0 {
		return nil, leg, nil, fmt.Errorf("report: scale plot: %w", errNoRuntimes)
	}
	padRange(&p.X, 1.25)
	padRange(&p.Y, 1.5)
	var ticks []plot.Tick
	for g := 1; g <= 1<<20; g *= 2 {
		if x := float64(g); x >= p.X.Min && x <= p.X.Max {
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.Itoa(g)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	return p, leg, labels, nil
}

// padRange widens a's range by factor f at each end, so that points on
// its ends are drawn whole on a log axis.
func padRange(a *plot.Axis, f float64) {
	a.Min /= f
	a.Max *= f
}
