package main

import (
	"bytes"
	"encoding/json"
	"pollux/testbed/artifact"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func runAllocatorBench(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"bench", "allocator"}, args...))
	err := root.Execute()
	return out.Bytes(), err
}

func TestBenchAllocatorSynthetic(t *testing.T) {
	out, err := runAllocatorBench(t, "--gpus", "32", "--rounds", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, key := range []string{"gpus", "jobs", "median_round_s", "p95_round_s", "fitness"} {
		if _, ok := rep[key]; !ok {
			t.Errorf("JSON lacks %q: %s", key, out)
		}
	}
	if rep["gpus"] != 32.0 || rep["jobs"] != 16.0 || !(rep["fitness"].(float64) > 0) {
		t.Errorf("report %v", rep)
	}
}

func TestBenchAllocatorSnapshots(t *testing.T) {
	dir := artifact.Need(t, "pollux-artifact", "allocator-snapshots")
	out, err := runAllocatorBench(t, "--snapshots", dir, "--seeds", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Snapshots map[string]struct {
			CurrentFitness float64 `json:"current_fitness"`
			Fitness        float64 `json:"fitness"`
			RoundS         float64 `json:"round_s"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rep.Snapshots) != 9 {
		t.Fatalf("%d snapshots: %s", len(rep.Snapshots), out)
	}
	for name, r := range rep.Snapshots {
		if !(r.Fitness >= r.CurrentFitness) || !(r.RoundS > 0) {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

func TestBenchAllocatorBadInput(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--gpus", "8", "--rounds", "0"},
		{"--snapshots", t.TempDir()},
		{"--snapshots", t.TempDir(), "--seeds", "0"},
		{"--gpus", "64", "--racks", "0"},
		{"--gpus", "64", "--racks", "17"},
		{"--gpus", "64", "--compare-flat"},
		{"--gpus", "64", "--racks", "4", "--cross-rack-ratio", "0.5"},
		{"--gpus", "64", "--out", t.TempDir()},
		{"--sia-scale", "two"},
		{"--sia-scale", "1,3"},
		{"--sia-scale", "64", "--out", t.TempDir()},
		{"--sia-scale", "1,2", "--sia-artifact", t.TempDir()},
	} {
		if _, err := runAllocatorBench(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		} else if exitCode(err) != 2 {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
}

// With racks, the report names them, says whether the search went rack
// by rack, and --compare-flat adds the flat search's figures.
func TestBenchAllocatorRacks(t *testing.T) {
	out, err := runAllocatorBench(t, "--gpus", "256", "--racks", "8", "--rounds", "2", "--compare-flat", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Racks        int     `json:"racks"`
		Ratio        float64 `json:"cross_rack_ratio"`
		Hierarchical bool    `json:"hierarchical"`
		Fitness      float64 `json:"fitness"`
		MedianS      float64 `json:"median_round_s"`
		Flat         *struct {
			Fitness      float64 `json:"fitness"`
			MedianS      float64 `json:"median_round_s"`
			FitnessRatio float64 `json:"fitness_ratio"`
			TimeRatio    float64 `json:"time_ratio"`
		} `json:"compare_flat"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Racks != 8 || rep.Ratio != 2 || !rep.Hierarchical || rep.Flat == nil {
		t.Fatalf("report %s", out)
	}
	if !(rep.Flat.Fitness > 0) || rep.Flat.FitnessRatio != rep.Fitness/rep.Flat.Fitness || rep.Flat.TimeRatio != rep.MedianS/rep.Flat.MedianS {
		t.Errorf("flat figures %s", out)
	}
	// Without --racks: one rack, the flat search.
	out, err = runAllocatorBench(t, "--gpus", "64", "--rounds", "1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Racks != 1 || rep.Hierarchical {
		t.Errorf("one rack: %s", out)
	}
}

// Every command's long help is read from help/ with its markers filled
// in.
func TestLongHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if strings.Contains(c.Long, "{{") {
			t.Errorf("%s: a marker is left in the help: %.200s", c.CommandPath(), c.Long[strings.Index(c.Long, "{{"):])
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	for _, name := range []string{"sim", "demo", "chaos", "fit", "worker"} {
		c, _, err := newRootCmd().Find([]string{name})
		if err != nil || len(c.Long) < 100 || strings.HasSuffix(c.Long, "\n") {
			t.Errorf("%s: long help %q (%v)", name, c.Long, err)
		}
	}
	if c, _, _ := newRootCmd().Find([]string{"chaos"}); strings.Contains(c.Long, "\n") || !strings.Contains(c.Long, "Scenarios: leader-kill,") {
		t.Errorf("chaos: the help is not one paragraph naming the scenarios: %.300s", c.Long)
	}
}
