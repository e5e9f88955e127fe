package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// smallFederation is a reduced federation of two 8-GPU labs (five jobs
// each, in testdata of the simulator).
var smallFederation = filepath.Join("..", "..", "testbed", "fedsim", "testdata", "small.json")

// --federation --json prints one JSON object with every mode and, per lab,
// the promised fields; the table names every mode and lab.
func TestSimFederationJSON(t *testing.T) {
	var stderr bytes.Buffer
	code, stdout := runCapture(t, []string{"sim", "--federation", smallFederation, "--json"}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	type lab struct {
		AvgJCT           *float64 `json:"avg_jct"`
		WorstFTF         *float64 `json:"worst_ftf"`
		GPUHoursLent     *float64 `json:"gpu_hours_lent"`
		GPUHoursBorrowed *float64 `json:"gpu_hours_borrowed"`
		ReclaimP95       *float64 `json:"reclaim_p95_s"`
	}
	var got struct {
		Modes map[string]struct {
			Labs map[string]lab `json:"labs"`
		} `json:"modes"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&got); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object (%v):\n%s", err, stdout)
	}
	for _, mode := range []string{"isolated", "merged", "federated"} {
		for _, name := range []string{"lab-a", "lab-b"} {
			l, ok := got.Modes[mode].Labs[name]
			if !ok || l.AvgJCT == nil || !(*l.AvgJCT > 0) || l.WorstFTF == nil || l.GPUHoursLent == nil || l.GPUHoursBorrowed == nil || l.ReclaimP95 == nil {
				t.Fatalf("%s %s: %+v", mode, name, l)
			}
		}
	}
	if b := got.Modes["federated"].Labs["lab-a"].GPUHoursBorrowed; !(*b > 0) {
		t.Errorf("lab-a borrowed %v GPU-h federated", *b)
	}
	stderr.Reset()
	code, table := runCapture(t, []string{"sim", "--federation", smallFederation}, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"isolated   lab-a", "merged     lab-b", "federated  lab-b", "reclaim p95", "federated / merged"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// Bad input with --federation exits with status 2 and says what is wrong.
func TestSimFederationBadInput(t *testing.T) {
	dir := t.TempDir()
	untrusted := writeFile(t, dir, "untrusted.json", `{"labs": [
	  {"name": "lab-a", "ca": "ca-a", "nodes": 1, "gpus_per_node": 4, "peers": [{"name": "lab-b", "ca": "ca-x"}],
	   "workload": {"generate": {"jobs": 1, "window_s": 0, "seed": 1}}},
	  {"name": "lab-b", "ca": "ca-b", "nodes": 1, "gpus_per_node": 4,
	   "workload": {"generate": {"jobs": 1, "window_s": 0, "seed": 2}}}]}`)
	notDir := writeFile(t, dir, "w.csv", wlHeader+"ncf-0,0,ncf,1,32768\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"flag that does not apply", []string{"--federation", "example", "--nodes", "4"}, "--nodes does not apply"},
		{"missing file", []string{"--federation", filepath.Join(dir, "absent.json")}, "absent.json"},
		{"peer with an unknown CA", []string{"--federation", untrusted}, "lab-b presents CA ca-b"},
		{"workload file instead of a directory", []string{"--federation", "example", "--workload", notDir}, "directory"},
		{"missing traces", []string{"--federation", "example", "--traces", filepath.Join(dir, "none")}, "none"},
		{"workload file without --workload", []string{"--federation", smallFederation, "--workload", dir}, "small-a.csv"},
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
