package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// typedTraces writes a toy application "toy" with traces for the given
// GPU types (Sia's column order), the untyped files only if untyped.
func typedTraces(t *testing.T, dir string, untyped bool, types ...string) string {
	return appTraces(t, dir, "toy", untyped, types...)
}

// appTraces writes the toy traces as application app.
func appTraces(t *testing.T, dir, app string, untyped bool, types ...string) string {
	t.Helper()
	traces := filepath.Join(dir, "traces")
	for i, typ := range types {
		f := 1.0 + float64(i)
		placements := "local_bsz,step_time,sync_time,placement\n" +
			fmtRow(8, 0.10/f, 0.001, "1") + fmtRow(16, 0.18/f, 0.001, "1") +
			fmtRow(8, 0.12/f, 0.02, "2") + fmtRow(16, 0.20/f, 0.02, "2") +
			fmtRow(8, 0.14/f, 0.04, "4") + fmtRow(16, 0.22/f, 0.04, "4")
		scal := "local_bsz,step_time,sync_time,num_nodes,num_replicas\n" +
			"8," + ftoa(0.2/f) + ",0.08,2,8\n16," + ftoa(0.3/f) + ",0.08,2,8\n"
		writeFile(t, traces, app+"/placements-"+typ+".csv", placements)
		writeFile(t, traces, app+"/scalability-"+typ+".csv", scal)
	}
	if untyped {
		writeFile(t, traces, app+"/placements.csv", "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.001\n1,16,0.18,0.001\n")
		writeFile(t, traces, app+"/scalability.csv", "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,8,0.2,0.08\n")
	}
	val := "progress,iteration,metric,grad_sqr,grad_var\n100,100,0.5,1,4\n200,200,0.6,1,4\n"
	writeFile(t, traces, app+"/validation-8.csv", val)
	writeFile(t, traces, app+"/validation-64.csv", "progress,iteration,metric,grad_sqr,grad_var\n110,20,0.5,1,4\n220,40,0.6,1,4\n")
	return traces
}

func fmtRow(m int, step, sync float64, placement string) string {
	return ftoa(float64(m)) + "," + ftoa(step) + "," + ftoa(sync) + "," + placement + "\n"
}

func ftoa(v float64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The three policies of Sia's comparison run on a cluster of two types and
// report Sia's figures.
func TestSimHeterogeneousJSON(t *testing.T) {
	dir := t.TempDir()
	traces := typedTraces(t, dir, false, "aws", "rtx")
	wl := writeFile(t, dir, "w.csv", wlHeader+"toy-0,0,toy,1,16\ntoy-1,30,toy,2,16\ntoy-2,200,toy,1,8\n")
	var stderr bytes.Buffer
	code, stdout := runCapture(t, []string{"sim", "--workload", wl, "--traces", traces, "--cluster", "aws:1,rtx:1x4", "--policy", "all", "--json", "--parallel", "1"}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got struct {
		Policies map[string]map[string]float64 `json:"policies"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	for _, p := range []string{"pollux-unaware", "sia", "pollux-het"} {
		fig, ok := got.Policies[p]
		if !ok {
			t.Fatalf("policy %s missing: %v", p, got.Policies)
		}
		for _, k := range []string{"avg_jct_h", "p99_jct_h", "makespan_h", "gpu_h_per_job", "restarts_per_job", "worst_ftf", "unfair_frac"} {
			if _, ok := fig[k]; !ok {
				t.Errorf("%s: no %s", p, k)
			}
		}
		if !(fig["avg_jct_h"] > 0) || !(fig["worst_ftf"] > 0) {
			t.Errorf("%s: %v", p, fig)
		}
	}
}

// Bad heterogeneous inputs exit with status 2 and name the file and line,
// or the flag.
func TestSimHeterogeneousBadInput(t *testing.T) {
	dir := t.TempDir()
	typed := typedTraces(t, dir, false, "aws")
	wl := writeFile(t, dir, "w.csv", wlHeader+"toy-0,0,toy,1,16\ntoy-1,30,toy,2,16\n")
	// Another application has RTX traces: the cluster's types all have
	// some, but not toy.
	appTraces(t, dir, "full", false, "aws", "rtx")
	zero := writeFile(t, dir, "zero.csv", "gpu_type,nodes,gpus_per_node\naws,2,4\nrtx,0,8\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"cluster file with zero GPUs", []string{"--workload", wl, "--traces", typed, "--cluster", zero}, "zero.csv:3"},
		{"bad inline cluster", []string{"--workload", wl, "--traces", typed, "--cluster", "aws:two"}, "--cluster entry 1"},
		{"application without traces for a type", []string{"--workload", wl, "--traces", typed, "--cluster", "aws:1,rtx:1", "--policy", "sia"}, "w.csv:2"},
		{"type without any traces", []string{"--workload", wl, "--traces", typed, "--cluster", "h100:1x8"}, "h100"},
		{"typed traces, untyped cluster", []string{"--workload", wl, "--traces", typed}, "w.csv:2"},
		{"type-blind policy on two types", []string{"--workload", wl, "--traces", typed, "--cluster", "aws:1,rtx:1", "--policy", "pollux"}, "pollux-unaware"},
		{"bad semantics", []string{"--workload", wl, "--traces", typed, "--cluster", "aws:1", "--semantics", "gavel"}, "semantics"},
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
