package report

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const groundTruth = `{"runs": [
 {"policy": "sia", "workload": "scale/rate_10/workload-1", "solver": "cbc", "avg_jct_h": 0.4},
 {"policy": "sia", "workload": "scale/rate_10/workload-2", "solver": "cbc", "avg_jct_h": 0.6},
 {"policy": "sia", "workload": "scale/rate_10/workload-1", "solver": "highs", "avg_jct_h": 9},
 {"policy": "sia", "workload": "saturn/workload-1@40", "solver": "cbc", "avg_jct_h": 9},
 {"policy": "sia", "workload": "philly/workload-1", "solver": "cbc", "avg_jct_h": 9},
 {"policy": "pollux", "workload": "scale/rate_20/workload-1", "solver": null, "avg_jct_h": 1.5},
 {"policy": "gavel", "workload": "scale/rate_20/workload-1", "avg_jct_h": 9}
]}`

func TestReadGroundTruth(t *testing.T) {
	refs, err := ReadGroundTruth(strings.NewReader(groundTruth))
	if err != nil {
		t.Fatal(err)
	}
	want := []RefPoint{{Policy: "sia", Point: "rate_10", AvgJCTH: 0.5, Workloads: 2}, {Policy: "pollux-unaware", Point: "rate_20", AvgJCTH: 1.5, Workloads: 1}}
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("got %+v, want %+v", refs, want)
	}
	if _, err := ReadGroundTruth(strings.NewReader(`{"runs": 3}`)); err == nil {
		t.Error("a malformed file was accepted")
	}
}

func FuzzReadGroundTruth(f *testing.F) {
	f.Add([]byte(groundTruth))
	f.Add([]byte(`{"runs": [{"policy": "sia", "workload": "a/b/c", "avg_jct_h": -1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		refs, err := ReadGroundTruth(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range refs {
			if r.Workloads < 1 || !(r.AvgJCTH >= 0) {
				t.Fatalf("bad point %+v", r)
			}
		}
	})
}

// Runs on workloads "POINT/W" form a sweep: one mean per policy and point.
func TestSweep(t *testing.T) {
	s := Summary{Runs: []RunSummary{
		{Policy: "sia", Workload: "rate_10/w1"}, {Policy: "sia", Workload: "rate_10/w2"}, {Policy: "sia", Workload: "rate_20/w1"},
	}}
	for i, a := range []float64{3600, 7200, 1800} {
		s.Runs[i].AvgJCT = a
	}
	means, names, ok := SweepPoints(s)
	if !ok || means["sia"][10] != 1.5 || means["sia"][20] != 0.5 || names[20] != "rate_20" {
		t.Fatalf("sweep %v %v %v", means, names, ok)
	}
	dir := t.TempDir()
	files, err := WriteSweepPlot(dir, s, []RefPoint{{Policy: "sia", Point: "rate_10", AvgJCTH: 1.4, Workloads: 1}})
	if err != nil || len(files) != 1 {
		t.Fatalf("files %v, %v", files, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "sweep-avg-jct.png")); err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("not a PNG (%v)", err)
	}
	for _, runs := range [][]RunSummary{
		{{Policy: "sia", Workload: "w1"}, {Policy: "sia", Workload: "rate_10/w1"}},
		{{Policy: "sia", Workload: "rate_10/w1"}, {Policy: "sia", Workload: "rate_10/w2"}},
		{{Policy: "sia", Workload: "rate/w1"}, {Policy: "sia", Workload: "rate_10/w2"}},
	} {
		if _, _, ok := SweepPoints(Summary{Runs: runs}); ok {
			t.Errorf("%v taken for a sweep", runs)
		}
		if files, err := WriteSweepPlot(t.TempDir(), Summary{Runs: runs}, nil); err != nil || len(files) != 0 {
			t.Errorf("%v: plot %v, %v", runs, files, err)
		}
	}
}
