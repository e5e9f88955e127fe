package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const wlHeader = "name,time,application,num_replicas,batch_size\n"

// Every kind of bad input exits with status 2 and names the file (and the
// line where there is one).
func TestSimBadInput(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.csv", wlHeader+"ncf-0,0,ncf,1,32768\n")
	unknown := writeFile(t, dir, "unknown.csv", wlHeader+"ncf-0,0,ncf,1,32768\nx-1,5,resnet,1,32\n")
	negative := writeFile(t, dir, "negative.csv", wlHeader+"ncf-0,-3,ncf,1,32768\n")
	notCSV := writeFile(t, dir, "notes.txt", "hello\n")
	binary := writeFile(t, dir, "image.csv", "\x89PNG\r\n\x1a\n\"\x00\x00")
	badTraces := filepath.Join(dir, "traces")
	writeFile(t, badTraces, "ncf/placements.csv", "placement,local_bsz,step_time,sync_time\n1,32,abc,0.1\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown application", []string{"--workload", unknown}, "unknown.csv:3"},
		{"negative time", []string{"--workload", negative}, "negative.csv:2"},
		{"non-CSV file", []string{"--workload", notCSV}, "notes.txt:1"},
		{"binary CSV", []string{"--workload", binary}, "image.csv:1"},
		{"missing workload", []string{"--workload", filepath.Join(dir, "absent.csv")}, "absent.csv"},
		{"missing traces", []string{"--workload", good, "--traces", filepath.Join(dir, "none")}, "none"},
		{"malformed traces", []string{"--workload", good, "--traces", badTraces}, "placements.csv:2"},
		{"unknown policy", []string{"--workload", good, "--policy", "fifo"}, "fifo"},
		{"bad interval", []string{"--workload", good, "--interval", "1500ms"}, "interval"},
		{"bad interference", []string{"--workload", good, "--interference", "2"}, "interference"},
		{"bad nodes", []string{"--workload", good, "--nodes", "0"}, "nodes"},
		{"bad p", []string{"--workload", good, "--p", "NaN"}, "--p"},
		{"bad parallel", []string{"--workload", good, "--parallel", "0"}, "--parallel"},
		{"bad flag", []string{"--bogus"}, "bogus"},
		{"zero racks", []string{"--workload", good, "--racks", "0"}, "--racks"},
		{"more racks than nodes", []string{"--workload", good, "--racks", "17"}, "17 racks for 16 nodes"},
		{"bad oversubscription", []string{"--workload", good, "--racks", "2", "--oversubscription", "0.5"}, "--oversubscription 0.5"},
		{"bad node bandwidth", []string{"--workload", good, "--racks", "2", "--node-bandwidth", "-1"}, "--node-bandwidth -1"},
		{"removed cross-rack ratio", []string{"--workload", good, "--racks", "2", "--cross-rack-ratio", "4"}, "unknown flag: --cross-rack-ratio"},
		{"removed cross-rack model", []string{"--workload", good, "--cross-rack-model", "overlap"}, "unknown flag: --cross-rack-model"},
		{"compare on one rack", []string{"--workload", good, "--compare-topology"}, "--compare-topology"},
		{"ground truth without out", []string{"--workload", good, "--ground-truth", notCSV}, "no --out"},
		{"unreadable ground truth", []string{"--workload", good, "--out", dir, "--ground-truth", filepath.Join(dir, "absent.json")}, "absent.json"},
		{"malformed ground truth", []string{"--workload", good, "--out", dir, "--ground-truth", notCSV}, "ground truth"},
		{"compare two policies", []string{"--workload", good, "--racks", "2", "--compare-topology", "--policy", "pollux,tiresias"}, "exactly one policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code, _ := runCapture(t, append([]string{"sim"}, tt.args...), &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

// runCapture runs the CLI with stdout captured and stderr into errBuf.
func runCapture(t *testing.T, args []string, errBuf *bytes.Buffer) (int, string) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(errBuf)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0, out.String()
	}
	errBuf.WriteString(err.Error())
	return exitCode(err), out.String()
}

// --json prints exactly one JSON object with the promised fields, and --out
// writes the summary, the per-job CSV and the plots.
func TestSimJSONAndOut(t *testing.T) {
	dir := t.TempDir()
	wl := writeFile(t, dir, "tiny.csv", wlHeader+
		"ncf-0,0,ncf,1,32768\ncifar10-1,30,cifar10,4,512\nyolov3-2,90,yolov3,4,64\nncf-3,200,ncf,1,32768\n")
	out := filepath.Join(dir, "out")
	var stderr bytes.Buffer
	code, stdout := runCapture(t, []string{"sim", "--workload", wl, "--policy", "pollux", "--json", "--out", out, "--parallel", "1"}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	var got struct {
		Runs []struct {
			Policy, Workload string
			AvgJCT           *float64 `json:"avg_jct"`
			P99JCT           *float64 `json:"p99_jct"`
			Makespan         *float64 `json:"makespan"`
			RestartsPerJob   *float64 `json:"restarts_per_job"`
			GPUHours         *float64 `json:"gpu_hours"`
			WorstFTF         *float64 `json:"worst_ftf"`
		} `json:"runs"`
		Policies map[string]struct {
			MeanAvgJCT *float64 `json:"mean_avg_jct"`
		} `json:"policies"`
	}
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value on stdout: %s", stdout)
	}
	if len(got.Runs) != 1 || got.Runs[0].Policy != "pollux" || got.Runs[0].Workload != "tiny" ||
		got.Runs[0].AvgJCT == nil || got.Runs[0].P99JCT == nil || got.Runs[0].Makespan == nil ||
		got.Runs[0].RestartsPerJob == nil || got.Runs[0].GPUHours == nil || got.Runs[0].WorstFTF == nil {
		t.Fatalf("runs: %+v", got.Runs)
	}
	if p := got.Policies["pollux"].MeanAvgJCT; p == nil || *p != *got.Runs[0].AvgJCT {
		t.Errorf("policies: %+v", got.Policies)
	}
	for _, f := range []string{"summary.json", "jobs.csv", "jct-cdf.png", "gpus-tiny.png", "batch-tiny.png", "index.html"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "jobs.csv"))
	if err != nil || strings.Count(string(data), "\n") != 5 {
		t.Errorf("jobs.csv: %v\n%s", err, data)
	}
	// index.html: the three plots embedded, the run's row.
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil || strings.Count(string(page), `src="data:image/png;base64,`) != 3 || !strings.Contains(string(page), "<td>pollux</td><td>tiny</td>") {
		t.Errorf("index.html: %v\n%.600s", err, page)
	}
}

// The same seed gives the same summary.json, byte for byte, for every
// policy.
func TestSimSameSeedSameSummary(t *testing.T) {
	dir := t.TempDir()
	wl := writeFile(t, dir, "tiny.csv", wlHeader+
		"ncf-0,0,ncf,1,32768\ncifar10-1,30,cifar10,4,512\nyolov3-2,90,yolov3,4,64\ncifar10-3,100,cifar10,8,1024\n")
	summary := func(name string) []byte {
		out := filepath.Join(dir, name)
		var stderr bytes.Buffer
		if code, _ := runCapture(t, []string{"sim", "--workload", wl, "--policy", "all", "--seed", "5", "--out", out}, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		data, err := os.ReadFile(filepath.Join(out, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	a, b := summary("a"), summary("b")
	if !bytes.Equal(a, b) {
		t.Errorf("same seed, different summaries:\n%s\n%s", a, b)
	}
	if !bytes.Contains(a, []byte(`"tiresias"`)) || !bytes.Contains(a, []byte(`"optimus"`)) {
		t.Errorf("summary lacks a policy:\n%s", a)
	}
}

// --compare-topology runs the policy aware of the racks and blind to them
// and prints the figures the issue names.
func TestSimCompareTopology(t *testing.T) {
	dir := t.TempDir()
	wl := writeFile(t, dir, "w.csv", wlHeader+"cifar10-0,0,cifar10,4,512\ncifar10-1,60,cifar10,4,512\nbert-2,120,bert,4,48\nncf-3,180,ncf,1,32768\n")
	var stderr bytes.Buffer
	code, out := runCapture(t, []string{"sim", "--policy", "pollux", "--workload", wl, "--racks", "4", "--oversubscription", "4", "--compare-topology", "--json"}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep struct {
		Racks int     `json:"racks"`
		Over  float64 `json:"oversubscription"`
		Apps  map[string]struct {
			Jobs   int     `json:"jobs"`
			Fitted float64 `json:"fitted_cross_rack_s"`
			True   float64 `json:"true_cross_rack_s"`
		} `json:"applications"`
		Reduction float64 `json:"avg_jct_reduction"`
		RackAware struct {
			MeanAvgJCT float64  `json:"mean_avg_jct"`
			Frac       *float64 `json:"cross_rack_gpu_time_frac"`
		} `json:"rack_aware"`
		RackBlind struct {
			MeanAvgJCT float64  `json:"mean_avg_jct"`
			Frac       *float64 `json:"cross_rack_gpu_time_frac"`
		} `json:"rack_blind"`
		Runs []struct {
			RackAware bool `json:"rack_aware"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Racks != 4 || rep.Over != 4 || rep.Apps == nil || len(rep.Runs) != 2 || rep.Runs[0].RackAware == rep.Runs[1].RackAware {
		t.Errorf("report %s", out)
	}
	if !(rep.RackAware.MeanAvgJCT > 0) || !(rep.RackBlind.MeanAvgJCT > 0) || rep.RackAware.Frac == nil || rep.RackBlind.Frac == nil {
		t.Errorf("missing figures: %s", out)
	}
	if want := 1 - rep.RackAware.MeanAvgJCT/rep.RackBlind.MeanAvgJCT; math.Abs(rep.Reduction-want) > 1e-12 {
		t.Errorf("reduction %v, want %v", rep.Reduction, want)
	}
}
