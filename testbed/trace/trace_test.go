package trace

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/testbed"
	"pollux/testbed/artifact"
)

func loadArtifact(t testing.TB) testbed.Catalog {
	t.Helper()
	cat, err := Load(artifact.Need(t, "pollux-artifact", "traces"))
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestArtifactLimits(t *testing.T) {
	cat := loadArtifact(t)
	tests := []struct {
		app                           string
		epochs, m0, mmax, mMin, mMaxL int
	}{
		{"bert", 2, 12, 384, 4, 12},
		{"cifar10", 100, 128, 4096, 32, 1024},
		{"yolov3", 50, 8, 512, 4, 8},
		{"ncf", 10, 256, 32768, 32, 32768},
	}
	for _, tt := range tests {
		a := cat[tt.app]
		if a == nil {
			t.Fatalf("%s missing", tt.app)
		}
		l := a.Limits()
		if a.MaxEpochs() != tt.epochs || l.InitBatch != tt.m0 || l.MaxBatch != tt.mmax || l.MinLocal != tt.mMin || l.MaxLocal != tt.mMaxL {
			t.Errorf("%s: epochs %d limits %+v", tt.app, a.MaxEpochs(), l)
		}
	}
}

// Measured points must be reproduced exactly, rotations included, and
// unmeasured placements must fall between their measured neighbours.
func TestArtifactStepTimes(t *testing.T) {
	cat := loadArtifact(t)
	a := cat["cifar10"].(*App)
	step, sync := a.StepTimes([]int{1}, 32)
	if math.Abs(step-0.0427886962890625) > 1e-12 || math.Abs(sync-0.0004995360016822816) > 1e-12 {
		t.Errorf("placement 1 m 32: %v %v", step, sync)
	}
	s1, _ := a.StepTimes([]int{1, 1, 2}, 64)
	s2, _ := a.StepTimes([]int{2, 1, 1}, 64)
	if s1 != s2 {
		t.Errorf("rotations differ: %v %v", s1, s2)
	}
	// 5 nodes x 1 replica lies between 4x1 and 6x1 (scalability.csv).
	lo, _ := a.atNodes(4, 4, 64)
	hi, _ := a.atNodes(6, 6, 64)
	mid, _ := a.StepTimes([]int{1, 1, 1, 1, 1}, 64)
	if mid < math.Min(lo, hi) || mid > math.Max(lo, hi) {
		t.Errorf("5x1 step %v outside [%v, %v]", mid, lo, hi)
	}
	// Monotone in m between two measured batches.
	a1, _ := a.StepTimes([]int{4}, 64)
	a2, _ := a.StepTimes([]int{4}, 80)
	a3, _ := a.StepTimes([]int{4}, 91)
	if !(a1 <= a2 && a2 <= a3) {
		t.Errorf("not monotone in m: %v %v %v", a1, a2, a3)
	}
}

func TestArtifactGradStats(t *testing.T) {
	cat := loadArtifact(t)
	a := cat["cifar10"]
	g := a.GradStats(128, 0)
	if g.GradSqr != 8.947307535897329 || g.GradVar != 5.066593295150894 {
		t.Errorf("exact batch: %+v", g)
	}
	lo, hi := a.GradStats(128, 3), a.GradStats(256, 3)
	mid := a.GradStats(192, 3)
	if math.Abs(mid.GradSqr-(lo.GradSqr+hi.GradSqr)/2) > 1e-9 {
		t.Errorf("interpolation: %v between %v and %v", mid.GradSqr, lo.GradSqr, hi.GradSqr)
	}
	if a.EpochEnd(0) != 0 || !(a.EpochEnd(1) > 0) || !(a.EpochEnd(2) > a.EpochEnd(1)) {
		t.Errorf("epoch ends %v %v %v", a.EpochEnd(0), a.EpochEnd(1), a.EpochEnd(2))
	}
}

func writeApp(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	app := filepath.Join(dir, "toy")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(app, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func toyFiles() map[string]string {
	return map[string]string{
		"placements.csv":    "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.001\n1,16,0.2,0.001\n2,8,0.12,0.02\n2,16,0.22,0.02\n11,8,0.15,0.05\n11,16,0.25,0.05\n",
		"scalability.csv":   "num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,4,8,0.3,0.2\n4,4,16,0.4,0.2\n",
		"validation-8.csv":  "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1,2\n20,20,0.6,0.5,2\n",
		"validation-32.csv": "progress,iteration,metric,grad_sqr,grad_var\n11,4,0.5,1,3\n21,8,0.6,0.5,3\n",
	}
}

func TestLoadToy(t *testing.T) {
	cat, err := Load(writeApp(t, toyFiles()))
	if err != nil {
		t.Fatal(err)
	}
	a := cat["toy"]
	if a.MaxEpochs() != 2 || a.EpochEnd(1) != 10 || a.EpochEnd(2) != 20 {
		t.Errorf("epochs %d ends %v %v", a.MaxEpochs(), a.EpochEnd(1), a.EpochEnd(2))
	}
	if l := a.Limits(); l.InitBatch != 8 || l.MaxBatch != 32 || l.MinLocal != 8 || l.MaxLocal != 16 {
		t.Errorf("limits %+v", l)
	}
	if it := a.Iterations(20, 2); it != 14 {
		t.Errorf("iterations at 20 after 2 epochs: %v, want 14", it)
	}
	// 3 nodes x 1 replica: halfway between (2,2) and (4,4) at ratio 1.
	if s, _ := a.StepTimes([]int{1, 1, 1}, 8); math.Abs(s-0.225) > 1e-12 {
		t.Errorf("3x1 step %v, want 0.225", s)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(map[string]string)
		wantErr error
		want    string
	}{
		{"missing placements", func(f map[string]string) { delete(f, "placements.csv") }, ErrNoTraces, "no application"},
		{"bad header", func(f map[string]string) { f["placements.csv"] = "a,b,c,d\n1,8,0.1,0.01\n" }, ErrMalformed, "placements.csv:1"},
		{"non-numeric", func(f map[string]string) {
			f["scalability.csv"] = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,4,8,0.3,0.2\n4,4,x,0.4,0.2\n"
		}, ErrMalformed, "scalability.csv:3"},
		{"negative step", func(f map[string]string) {
			f["scalability.csv"] = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,4,8,-0.3,0.2\n"
		}, ErrMalformed, "scalability.csv:2"},
		{"zero in placement", func(f map[string]string) {
			f["placements.csv"] = "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.001\n10,8,0.1,0.01\n"
		}, ErrMalformed, "placements.csv:3"},
		{"missing scalability", func(f map[string]string) { delete(f, "scalability.csv") }, ErrMalformed, "scalability.csv"},
		{"no validation", func(f map[string]string) { delete(f, "validation-8.csv"); delete(f, "validation-32.csv") }, ErrMalformed, "validation"},
		{"decreasing progress", func(f map[string]string) {
			f["validation-8.csv"] = "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1,2\n5,20,0.6,0.5,2\n"
		}, ErrMalformed, "validation-8.csv:3"},
		{"binary file", func(f map[string]string) { f["placements.csv"] = "\x89PNG\r\n\x1a\n\x00\x00" }, ErrMalformed, "placements.csv:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := toyFiles()
			tt.edit(files)
			_, err := Load(writeApp(t, files))
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %v containing %q", err, tt.wantErr, tt.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, ErrNoTraces) {
		t.Errorf("absent dir: %v", err)
	}
}

func FuzzDecodeTable(f *testing.F) {
	f.Add("placement,local_bsz,step_time,sync_time\n1,8,0.1,0.001\n")
	f.Add("placement,local_bsz,step_time,sync_time\n1,8,NaN,0.001\n")
	f.Add("a\n\"unterminated\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, body string) {
		tab, err := decodeTable(strings.NewReader(body), "fuzz.csv", []string{"placement", "local_bsz", "step_time", "sync_time"})
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "fuzz.csv") {
				t.Fatalf("error %v does not wrap ErrMalformed or name the file", err)
			}
			return
		}
		for _, r := range tab.rows {
			for _, v := range r {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("non-finite value accepted: %v", r)
				}
			}
		}
	})
}

func TestLoadMeasured(t *testing.T) {
	rows, err := LoadMeasured(filepath.Join(writeApp(t, toyFiles()), "toy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8", len(rows))
	}
	r := rows[4]
	if r.Placement != "1.1" || r.Nodes != 2 || r.Replicas != 2 || r.LocalBatch != 8 || math.Abs(r.AccumTime-0.1) > 1e-12 || r.StepTime != 0.15 {
		t.Errorf("row 4: %+v", r)
	}
	if rows[7].Placement != "4x4" || rows[7].Nodes != 4 {
		t.Errorf("row 7: %+v", rows[7])
	}
}

// BenchmarkStepTimes looks up an unmeasured placement (the interpolated
// path) on the artifact traces.
func BenchmarkStepTimes(b *testing.B) {
	a := loadArtifact(b)["imagenet"]
	p := []int{4, 4, 3, 4, 4, 2, 4}
	for b.Loop() {
		a.StepTimes(p, 100)
	}
}
