package report

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// published is shaped like the artifact's published.json (its numbers
// made up).
const published = `{
 "heterogeneous_cluster": {"total_gpus": 64},
 "policy_runtime_64gpu_helios_heterogeneous_s": {
  "sia": {"median": 0.5, "p95": 0.9},
  "pollux": {"median": 3}
 },
 "policy_runtime_vs_cluster_size": "Figure 9, 64 to 2048 GPUs: Pollux's search slower than Sia's; read off the plot, Pollux ~40 s at 256 GPUs, ~2.5 s at 128; the text calls Sia's runtime single-second at 2048"
}`

func TestReadPublishedRuntimes(t *testing.T) {
	refs, err := ReadPublishedRuntimes(strings.NewReader(published))
	if err != nil {
		t.Fatal(err)
	}
	want := []RuntimeRef{
		{Policy: "pollux", GPUs: 128, Stat: StatFigure9, Seconds: 2.5},
		{Policy: "pollux", GPUs: 256, Stat: StatFigure9, Seconds: 40},
		{Policy: "pollux", GPUs: 64, Stat: "median", Seconds: 3},
		{Policy: "sia", GPUs: 64, Stat: "median", Seconds: 0.5},
		{Policy: "sia", GPUs: 64, Stat: "p95", Seconds: 0.9},
		{Policy: "sia", GPUs: 2048, Stat: StatText, Seconds: 1},
	}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("got %+v\nwant %+v", refs, want)
	}
	for _, bad := range []string{`{"heterogeneous_cluster": 3}`, `{}`, `{"heterogeneous_cluster": {"total_gpus": 64}}`, `[`} {
		if _, err := ReadPublishedRuntimes(strings.NewReader(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzReadPublishedRuntimes(f *testing.F) {
	f.Add([]byte(published))
	f.Add([]byte(`{"heterogeneous_cluster": {"total_gpus": 64}, "policy_runtime_64gpu_helios_heterogeneous_s": {"x": {"median": -1}}, "policy_runtime_vs_cluster_size": "~5 s at 9 sia ~1e400 s at 0 pollux ~99999999999999999999 s at 99999999999999999"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		refs, err := ReadPublishedRuntimes(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range refs {
			if r.GPUs <= 0 || !(r.Seconds > 0) || r.Policy == "" {
				t.Fatalf("bad runtime %+v", r)
			}
		}
		if slices.ContainsFunc(refs, func(r RuntimeRef) bool { return r.Policy == "sia" || r.Policy == "pollux" }) {
			// Whatever was read of Sia's and Pollux's can be drawn.
			p, _, _, err := scalePlot(nil, refs)
			if err != nil {
				t.Fatalf("plot of %+v: %v", refs, err)
			}
			p.Draw(draw.New(vgimg.New(vg.Points(80), vg.Points(60))))
		}
	})
}

// The plot has a median and a p95 line per policy and a marker series
// per published policy and statistic (Sia's and Pollux's only); points
// that a log axis cannot show are left out.
func TestScalePlot(t *testing.T) {
	var points []ScalePoint
	for i, gpus := range []int{64, 128, 256} {
		f := float64(i + 1)
		points = append(points,
			ScalePoint{Policy: "sia", GPUs: gpus, MedianS: 0.01 * f, P95S: 0.02 * f},
			ScalePoint{Policy: "pollux-unaware", GPUs: gpus, MedianS: 0.1 * f, P95S: 0.3 * f})
	}
	points = append(points, ScalePoint{Policy: "zero", GPUs: 64})
	refs, err := ReadPublishedRuntimes(strings.NewReader(published))
	if err != nil {
		t.Fatal(err)
	}
	refs = append(refs, RuntimeRef{Policy: "gavel", GPUs: 64, Stat: "median", Seconds: 0.01})
	p, _, labels, err := scalePlot(points, refs)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"sia median", "sia p95", "pollux-unaware median", "pollux-unaware p95",
		"published pollux figure 9 (read off the plot)", "published pollux median",
		"published sia median", "published sia p95", `published sia text ("single-second")`,
	}
	if !slices.Equal(labels, want) {
		t.Errorf("labels %q\nwant %q", labels, want)
	}
	if p.X.Min != 64/1.25 || p.X.Max != 2048*1.25 || p.Y.Min != 0.01/1.5 || p.Y.Max != 40*1.5 {
		t.Errorf("axes x %v..%v, y %v..%v", p.X.Min, p.X.Max, p.Y.Min, p.Y.Max)
	}
	dir := t.TempDir()
	files, err := WriteScalePlot(dir, points, refs)
	if err != nil || len(files) != 1 || files[0] != filepath.Join(dir, "scale-round-time.png") {
		t.Fatalf("files %v, %v", files, err)
	}
	if data, err := os.ReadFile(files[0]); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("not a PNG (%v)", err)
	}
	if _, err := WriteScalePlot(t.TempDir(), []ScalePoint{{Policy: "sia", GPUs: 64}}, nil); err == nil {
		t.Error("a plot without a positive runtime was drawn")
	}
	if _, err := WriteScalePlot(filepath.Join(files[0], "sub"), points, refs); err == nil {
		t.Error("wrote under a file")
	}
}
