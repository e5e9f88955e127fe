package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/testbed/sim"
)

func results() []*sim.Result {
	mk := func(policy, wl string, jcts ...float64) *sim.Result {
		r := &sim.Result{Policy: policy, Workload: wl}
		for i, j := range jcts {
			r.Jobs = append(r.Jobs, sim.JobResult{Name: string(rune('a' + i)), App: "x", Submit: 0, Completion: j, JCT: j, FTF: 1})
			r.Timeline = append(r.Timeline, sim.Sample{Time: float64(60 * (i + 1)), GPUs: i, MeanBatch: 32})
		}
		r.Metrics = sim.Summarize(r.Jobs)
		return r
	}
	return []*sim.Result{
		mk("pollux", "w1", 100, 200), mk("pollux", "w2", 300),
		mk("tiresias", "w1", 200, 400), mk("tiresias", "w2", 600),
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize(results())
	p, ti := s.Policies["pollux"], s.Policies["tiresias"]
	// Means over workloads of per-workload averages: (150+300)/2, (300+600)/2.
	if p.MeanAvgJCT != 225 || ti.MeanAvgJCT != 450 || p.Workloads != 2 {
		t.Fatalf("means %v %v", p.MeanAvgJCT, ti.MeanAvgJCT)
	}
	if red := p.ReductionVs["tiresias"]; math.Abs(red-0.5) > 1e-12 {
		t.Errorf("reduction %v, want 0.5", red)
	}
	if len(ti.ReductionVs) != 0 || len(s.Runs) != 4 {
		t.Errorf("baseline reductions %v, runs %d", ti.ReductionVs, len(s.Runs))
	}
	var buf bytes.Buffer
	if err := PrintTable(&buf, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Pollux average JCT vs tiresias: 50.0% lower") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestOutputs(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJobsCSV(&buf, results()); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 7 {
		t.Errorf("%d CSV lines, want 7:\n%s", lines, buf.String())
	}
	dir := t.TempDir()
	files, err := WritePlots(dir, results())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"jct-cdf.png", "gpus-w1.png", "batch-w1.png", "gpus-w2.png", "batch-w2.png"}
	if len(files) != len(want) {
		t.Fatalf("files %v", files)
	}
	for _, f := range want {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", f, err)
		}
	}
}
