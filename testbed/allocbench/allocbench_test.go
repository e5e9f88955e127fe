package allocbench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pollux/internal/usage"
	"pollux/testbed/artifact"
)

func TestSynthetic(t *testing.T) {
	rep, err := Synthetic(Options{GPUs: 16, Rounds: 2, Seed: 1, Racks: 2, CrossRackRatio: 2, CompareFlat: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GPUsPerNode != 4 || rep.Jobs != 8 || rep.Nodes != 4 || rep.Racks != 2 || rep.CompareFlat == nil || rep.Fitness <= 0 || rep.MedianS <= 0 {
		t.Errorf("report %+v", rep)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.Contains(lines[2], "flat") {
		t.Errorf("table (header, searched rounds, flat rounds):\n%s", out.String())
	}
}

func TestSyntheticBadInput(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "give --gpus G"},
		{Options{GPUs: 8, Rounds: 0, Racks: 1, CrossRackRatio: 2}, "--rounds 0"},
		{Options{GPUs: 8, Rounds: 1, Racks: 1, CrossRackRatio: 0.5}, "--cross-rack-ratio 0.5"},
		{Options{GPUs: 8, Rounds: 1, Racks: 1, CrossRackRatio: 2, CompareFlat: true}, "--compare-flat needs --racks"},
		{Options{GPUs: 8, Rounds: 1, Racks: 9, CrossRackRatio: 2}, "--racks"},
	} {
		if _, err := Synthetic(tc.o); !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want bad input with %q", tc.o, err, tc.want)
		}
	}
}

func TestSnapshotsAndSiaScaleBadInput(t *testing.T) {
	if err := Snapshots(&bytes.Buffer{}, t.TempDir(), 0, false); !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), "--seeds 0") {
		t.Errorf("no seeds: %v", err)
	}
	if err := Snapshots(&bytes.Buffer{}, t.TempDir()+"/absent", 1, false); !errors.Is(err, usage.ErrBadSetting) {
		t.Errorf("absent directory: %v", err)
	}
	for _, o := range []SiaScaleOptions{{Scale: 65}, {Scale: 1, MaxRounds: -1}, {Scale: 1, Dir: t.TempDir(), Workload: "workload-1"}} {
		if err := SiaScale(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, usage.ErrBadSetting) {
			t.Errorf("%+v: err = %v, want bad input", o, err)
		}
	}
}

func TestParseScales(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  string
	}{
		{in: "1,2,4,8,16,32", want: []int{1, 2, 4, 8, 16, 32}},
		{in: "32, 1 ,4", want: []int{1, 4, 32}},
		{in: "8", want: []int{8}},
		{in: "1,3", bad: `"3" is not a power of two`},
		{in: "64", bad: `"64" is not a power of two in 1..32`},
		{in: "0,1", bad: `"0"`},
		{in: "-2", bad: `"-2"`},
		{in: "1,,2", bad: `""`},
		{in: "", bad: `""`},
		{in: "2x", bad: `"2x"`},
		{in: "2,4,2", bad: "2 given twice"},
	} {
		got, err := ParseScales(tc.in)
		if tc.bad != "" {
			if !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%q: %v, %v; want a usage error with %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// fakeArtifact is an artifact directory with empty scale workloads for
// scales and a published.json holding published.
func fakeArtifact(t *testing.T, published string, scales ...int) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range scales {
		path := scaleWorkload(dir, "workload-1", n)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if published != "" {
		if err := os.WriteFile(filepath.Join(dir, "published.json"), []byte(published), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every input of the sweep is checked before the first replay, each as a
// usage error naming it.
func TestSiaSweepBadInput(t *testing.T) {
	const published = `{"heterogeneous_cluster": {"total_gpus": 64}, "policy_runtime_64gpu_helios_heterogeneous_s": {"sia": {"median": 0.1}}}`
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := SiaScaleOptions{Workload: "workload-1", Policies: "sia"}
	with := func(dir string, scales []int, out string) SiaSweepOptions {
		o := SiaSweepOptions{SiaScaleOptions: base, Scales: scales, Out: out}
		o.Dir = dir
		return o
	}
	full := fakeArtifact(t, published, 1, 2)
	for _, tc := range []struct {
		name string
		o    SiaSweepOptions
		want string
	}{
		{"no sizes", with(full, nil, ""), "no sizes"},
		{"not a power of two", with(full, []int{1, 3}, ""), "--sia-scale 3"},
		{"too large", with(full, []int{64}, ""), "--sia-scale 64"},
		{"missing workload", with(fakeArtifact(t, published, 1), []int{1, 2}, ""), "scale_2x"},
		{"missing published.json", with(fakeArtifact(t, "", 1, 2), []int{1, 2}, t.TempDir()), "published.json"},
		{"malformed published.json", with(fakeArtifact(t, `{"heterogeneous_cluster": 3}`, 1), []int{1}, t.TempDir()), "published.json"},
		{"unwritable --out", with(full, []int{1, 2}, filepath.Join(file, "out")), "--out"},
	} {
		var stderr bytes.Buffer
		err := SiaSweep(context.Background(), tc.o, &bytes.Buffer{}, &stderr)
		if !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a usage error with %q", tc.name, err, tc.want)
		}
		if strings.Contains(stderr.String(), "replaying") {
			t.Errorf("%s: replayed before refusing: %s", tc.name, stderr.String())
		}
	}
	if err := RunSiaScale(context.Background(), "two", SiaSweepOptions{SiaScaleOptions: base}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, usage.ErrBadSetting) {
		t.Errorf("--sia-scale two: %v", err)
	}
}

// A small sweep on the artifact: one JSON object with a point per N, and
// the plot, JSON and CSV written beside each other after every N.
func TestSiaSweepArtifact(t *testing.T) {
	dir := artifact.Need(t, "sia-artifact", "workloads", "scale", "scale_2x")
	dir = filepath.Dir(filepath.Dir(filepath.Dir(dir)))
	out := filepath.Join(t.TempDir(), "sweep")
	o := SiaSweepOptions{
		SiaScaleOptions: SiaScaleOptions{Dir: dir, Workload: "workload-1", Policies: "sia,pollux-het", MaxRounds: 3, JSON: true},
		Out:             out,
	}
	var stdout, stderr bytes.Buffer
	if err := RunSiaScale(context.Background(), "2,1", o, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var doc struct {
		Points []struct {
			Scale    int              `json:"scale"`
			GPUs     int              `json:"gpus"`
			Policies []SiaScaleReport `json:"policies"`
		} `json:"sia_scale_sweep"`
		Published []struct {
			Policy string `json:"policy"`
		} `json:"published"`
		Files []string `json:"files"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(doc.Points) != 2 || doc.Points[0].Scale != 1 || doc.Points[0].GPUs != 64 || doc.Points[1].Scale != 2 || doc.Points[1].GPUs != 128 {
		t.Fatalf("points %+v", doc.Points)
	}
	for _, pt := range doc.Points {
		if len(pt.Policies) != 2 || pt.Policies[0].Policy != "sia" || pt.Policies[1].Policy != "pollux-het" {
			t.Fatalf("scale %d: policies %+v", pt.Scale, pt.Policies)
		}
		for _, r := range pt.Policies {
			if r.Rounds != 3 || !(r.MedianS > 0) || r.P95S < r.MedianS || r.Scale != pt.Scale {
				t.Errorf("scale %d: report %+v", pt.Scale, r)
			}
		}
	}
	if len(doc.Published) == 0 {
		t.Error("no published runtimes")
	}
	if !strings.Contains(stderr.String(), "(1 of 2 sizes)") || !strings.Contains(stderr.String(), "(2 of 2 sizes)") {
		t.Errorf("the files were not written after each size:\n%s", stderr.String())
	}
	want := []string{filepath.Join(out, "scale-round-time.png"), filepath.Join(out, "scale-round-time.csv"), filepath.Join(out, "scale-round-time.json")}
	if !slices.Equal(doc.Files, want) {
		t.Errorf("files %v, want %v", doc.Files, want)
	}
	if data, err := os.ReadFile(want[0]); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("%s is not a PNG (%v)", want[0], err)
	}
	if data, err := os.ReadFile(want[2]); err != nil || !bytes.Equal(data, stdout.Bytes()) {
		t.Errorf("%s differs from what was printed (%v)", want[2], err)
	}
	f, err := os.Open(want[1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 5 || rows[0][0] != "scale" || rows[4][0] != "2" || rows[4][4] != "pollux-het" {
		t.Errorf("CSV %v (%v)", rows, err)
	}
}
