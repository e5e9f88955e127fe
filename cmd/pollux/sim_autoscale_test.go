package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"pollux/testbed/artifact"
)

// cloudJSON is the promised shape of `pollux sim --autoscale --json`.
type cloudJSON struct {
	Policies map[string]struct {
		JCT       *float64 `json:"jct_s"`
		NodeHours *float64 `json:"node_hours"`
		Cost      *float64 `json:"cost"`
		PeakNodes *float64 `json:"peak_nodes"`
		MeanNodes *float64 `json:"mean_nodes"`
	} `json:"policies"`
}

// decodeCloud decodes stdout as exactly one JSON object with the three
// policies and their three fields.
func decodeCloud(t *testing.T, stdout string) cloudJSON {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var got cloudJSON
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value on stdout: %s", stdout)
	}
	if len(got.Policies) != 3 {
		t.Fatalf("policies: %s", stdout)
	}
	for _, name := range []string{"pollux-autoscale", "throughput-autoscale", "fixed"} {
		p, ok := got.Policies[name]
		if !ok || p.JCT == nil || p.NodeHours == nil || p.Cost == nil || !(*p.JCT > 0) || !(*p.NodeHours > 0) {
			t.Fatalf("policy %s missing or without jct_s, node_hours, cost: %s", name, stdout)
		}
	}
	return got
}

// TestSimAutoscaleJSON: --autoscale --json prints the three policies with
// jct_s, node_hours and cost; the cost is the node-hours times
// --node-cost; the fixed cluster pays for --max-nodes nodes throughout
// (the workload starts at 0); --out writes the node-count plot.
func TestSimAutoscaleJSON(t *testing.T) {
	dir := t.TempDir()
	wl := writeFile(t, dir, "one.csv", wlHeader+"cifar10-0,0,cifar10,4,512\n")
	out := filepath.Join(dir, "out")
	var stderr bytes.Buffer
	code, stdout := runCapture(t, []string{"sim", "--autoscale", "--workload", wl, "--max-nodes", "4", "--node-cost", "2", "--boot-delay", "90s", "--json", "--out", out}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got := decodeCloud(t, stdout)
	var raw struct {
		Policies map[string]map[string]float64 `json:"policies"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatal(err)
	}
	for name, p := range got.Policies {
		if d := *p.Cost - 2**p.NodeHours; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: cost %v for %v node-hours at 2 per node-hour", name, *p.Cost, *p.NodeHours)
		}
	}
	// Nodes are paid until the end of the round (60 s) in which the last
	// job finished.
	fixed := raw.Policies["fixed"]
	if nh, ms := fixed["node_hours"], fixed["makespan_s"]; nh < 4*ms/3600 || nh > 4*(ms+60)/3600 || fixed["peak_nodes"] != 4 {
		t.Errorf("fixed cluster: %v", fixed)
	}
	for _, f := range []string{"summary.json", "jobs.csv", "timeline.csv", "nodes-one.png", "efficiency-one.png", "index.html"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// index.html: a row per policy, the two plots embedded.
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil || strings.Count(string(page), `src="data:image/png;base64,`) != 2 {
		t.Errorf("index.html: %v\n%.600s", err, page)
	}
	for name := range got.Policies {
		if !strings.Contains(string(page), "<td>"+name+"</td>") {
			t.Errorf("index.html has no row of %s", name)
		}
	}
}

// TestSimAutoscaleArtifact is the "must show" on the artifact's
// ImageNet traces: the JSON fields, and Pollux deciding the size pays less
// than the fixed cluster of the maximum size.
func TestSimAutoscaleArtifact(t *testing.T) {
	traces := artifact.Need(t, "pollux-artifact", "traces")
	var stderr bytes.Buffer
	code, stdout := runCapture(t, []string{"sim", "--autoscale", "--traces", traces, "--json"}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got := decodeCloud(t, stdout)
	if a, f := *got.Policies["pollux-autoscale"].Cost, *got.Policies["fixed"].Cost; !(a < f) {
		t.Fatalf("pollux-autoscale cost %v, fixed cluster %v", a, f)
	}
}

// TestSimAutoscaleSeveralGPUTypes: Sia's per-type traces, two fixed aws
// nodes and dgx-ext nodes added (the cloud scenario's ImageNet job):
// pollux-autoscale (pollux-het deciding the size) and fixed run, not the
// type-blind throughput baseline; the cost is the node-hours times the
// price; the fixed cluster pays for --max-nodes throughout; the elastic
// one grows beyond its two aws nodes and never goes below them.
func TestSimAutoscaleSeveralGPUTypes(t *testing.T) {
	traces := artifact.Need(t, "sia-artifact", "traces")
	out := t.TempDir()
	var stderr bytes.Buffer
	code, stdout := runCapture(t, []string{"sim", "--autoscale", "--cluster", "aws:2,dgx-ext:1", "--node-gpu-type", "dgx-ext", "--max-nodes", "6",
		"--traces", traces, "--json", "--out", out}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got cloudJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if len(got.Policies) != 2 {
		t.Fatalf("policies: %s", stdout)
	}
	for _, name := range []string{"pollux-autoscale", "fixed"} {
		p, ok := got.Policies[name]
		if !ok || p.JCT == nil || p.NodeHours == nil || p.Cost == nil || !(*p.JCT > 0) {
			t.Fatalf("policy %s missing or without jct_s, node_hours, cost: %s", name, stdout)
		}
		if math.Abs(*p.Cost-3.912**p.NodeHours) > 1e-6 {
			t.Errorf("%s: cost %v for %v node-hours", name, *p.Cost, *p.NodeHours)
		}
	}
	f := got.Policies["fixed"]
	if *f.MeanNodes != 6 || *f.PeakNodes != 6 {
		t.Errorf("fixed cluster: %s", stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, "timeline.csv"))
	if err != nil {
		t.Fatal(err)
	}
	peak := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
		cols := strings.Split(line, ",")
		if cols[1] != "pollux-autoscale" {
			continue
		}
		n, err := strconv.Atoi(cols[3])
		if err != nil {
			t.Fatal(err)
		}
		if n < 2 {
			t.Fatalf("the elastic cluster went below its two fixed aws nodes: %s", line)
		}
		peak = max(peak, n)
	}
	if peak <= 2 {
		t.Errorf("the elastic cluster never grew (peak %d nodes)", peak)
	}
}

// Bad autoscaling input exits with status 2 and says what is wrong.
func TestSimAutoscaleBadInput(t *testing.T) {
	dir := t.TempDir()
	wl := writeFile(t, dir, "one.csv", wlHeader+"cifar10-0,0,cifar10,4,512\n")
	unknown := writeFile(t, dir, "unknown.csv", wlHeader+"x-0,0,resnet,4,512\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"min above max", []string{"--autoscale", "--min-nodes", "5", "--max-nodes", "4"}, "--min-nodes 5 is above --max-nodes 4"},
		{"negative cost", []string{"--autoscale", "--node-cost", "-1"}, "--node-cost"},
		{"NaN cost", []string{"--autoscale", "--node-cost", "NaN"}, "--node-cost"},
		{"negative boot delay", []string{"--autoscale", "--boot-delay", "-5s"}, "--boot-delay"},
		{"no max", []string{"--autoscale", "--max-nodes", "0"}, "--max-nodes"},
		{"negative min", []string{"--autoscale", "--min-nodes", "-1"}, "--min-nodes"},
		{"threshold above 1", []string{"--autoscale", "--scaling-threshold", "1.5"}, "--scaling-threshold"},
		{"utility band inverted", []string{"--autoscale", "--low-util", "0.7", "--high-util", "0.6"}, "--low-util"},
		{"fixed size with autoscale", []string{"--autoscale", "--nodes", "8"}, "--nodes cannot be used with --autoscale"},
		{"several types without the added one", []string{"--autoscale", "--cluster", "hetero"}, "needs --node-gpu-type"},
		{"added type not in the cluster", []string{"--autoscale", "--cluster", "aws:1,rtx:1", "--node-gpu-type", "a100"}, "--node-gpu-type a100 is not a GPU type of --cluster (aws, rtx)"},
		{"added type without a cluster", []string{"--autoscale", "--node-gpu-type", "a100"}, "--node-gpu-type a100 needs --cluster"},
		{"throughput baseline on several types", []string{"--autoscale", "--cluster", "aws:1,rtx:1", "--node-gpu-type", "rtx", "--policy", "throughput-autoscale"}, "blind to GPU types"},
		{"typed cluster without traces", []string{"--autoscale", "--cluster", "aws:1,rtx:1", "--node-gpu-type", "rtx"}, "--cluster needs --traces"},
		{"fixed nodes above the maximum", []string{"--autoscale", "--cluster", "aws:5,rtx:1", "--node-gpu-type", "rtx", "--max-nodes", "4"}, "always there"},
		{"semantics with autoscale", []string{"--autoscale", "--semantics", "sia"}, "--semantics cannot be used with --autoscale"},
		{"racks with autoscale", []string{"--autoscale", "--racks", "2"}, "--racks cannot be used with --autoscale"},
		{"autoscale flag alone", []string{"--max-nodes", "8"}, "--max-nodes needs --autoscale"},
		{"unknown autoscale policy", []string{"--autoscale", "--policy", "tiresias"}, "tiresias"},
		{"bad GPUs per node", []string{"--autoscale", "--gpus-per-node", "0"}, "GPUs per node"},
		{"unknown application", []string{"--autoscale", "--workload", unknown}, "unknown.csv:2"},
		{"missing traces", []string{"--autoscale", "--workload", wl, "--traces", filepath.Join(dir, "none")}, "none"},
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
