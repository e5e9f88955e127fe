package refsnap

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/optimizer"
	"pollux/testbed/artifact"
)

func loadArtifact(t testing.TB) []Entry {
	t.Helper()
	dir := artifact.Need(t, "pollux-artifact", "allocator-snapshots")
	entries, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestObjectiveReproducesReference checks that our objective gives every
// artifact snapshot's current allocation the fitness the Python artifact
// computed, to 1e-6 relative.
func TestObjectiveReproducesReference(t *testing.T) {
	entries := loadArtifact(t)
	if len(entries) != 9 {
		t.Fatalf("got %d snapshots, want 9", len(entries))
	}
	for _, e := range entries {
		obj, err := optimizer.NewObjective(e.Snapshot, optimizer.DefaultPowerMean)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		cur := make([]optimizer.Placement, len(e.Snapshot.Jobs))
		for j := range cur {
			cur[j] = e.Snapshot.Jobs[j].Current
		}
		got := obj.Fitness(cur)
		want := e.Reference.CurrentFitness
		rel := math.Abs(got-want) / want
		t.Logf("%s: fitness %.12g, reference %.12g, relative error %.2g", e.Name, got, want, rel)
		if rel > 1e-6 {
			t.Errorf("%s: fitness %.12g, reference %.12g (relative error %.3g)", e.Name, got, want, rel)
		}
	}
}

const goodSnap = `{"meta": {"workload": "w", "sim_time": 60, "n_jobs": 2, "seed": 0},
 "nodes": [{"name": 1, "resources": {"nvidia.com/gpu": 4}, "preemptible": false},
           {"name": 0, "resources": {"nvidia.com/gpu": 4}, "preemptible": false}],
 "jobs": [
  {"name": "a", "creation_timestamp": 1, "attained_service": 60, "min_replicas": 0, "max_replicas": 4,
   "num_restarts": 1, "age": 59, "resources": {"nvidia.com/gpu": 1}, "allocation": [0, 0, 1],
   "speedup": {"kind": "goodput", "perf_params": [0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.5],
     "grad_params": [1, 2], "init_batch_size": 128, "max_batch_size": 1024,
     "atomic_bsz_range": [32, 256], "accumulation": true}},
  {"name": "b", "creation_timestamp": 2, "attained_service": 0, "min_replicas": 0, "max_replicas": 1,
   "num_restarts": 0, "age": 5, "allocation": [], "speedup": {"kind": "linear"}}]}`

func TestDecode(t *testing.T) {
	snap, meta, err := Decode(strings.NewReader(goodSnap))
	if err != nil {
		t.Fatal(err)
	}
	if meta.Jobs != 2 || snap.Now != 60 {
		t.Errorf("meta %+v now %v", meta, snap.Now)
	}
	if snap.Nodes[0].ID != "0" || snap.Nodes[1].ID != "1" {
		t.Errorf("nodes not in reference order: %+v", snap.Nodes)
	}
	a := snap.Jobs[0]
	want := optimizer.Placement{{Node: 0, Count: 2}, {Node: 1, Count: 1}}
	if !a.Current.Equal(want) || a.Model == nil || a.Model.Limits.MaxLocal != 256 || a.Restarts != 1 {
		t.Errorf("job a decoded as %+v", a)
	}
	if b := snap.Jobs[1]; b.Model != nil || len(b.Current) != 0 {
		t.Errorf("job b decoded as %+v", b)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"truncated", goodSnap, goodSnap[:200], "unexpected EOF"},
		{"no meta", `"meta": {"workload": "w", "sim_time": 60, "n_jobs": 2, "seed": 0},`, ``, "missing meta"},
		{"unknown node", `"allocation": [0, 0, 1]`, `"allocation": [0, 7]`, `unknown node "7"`},
		{"missing age", `"age": 59,`, ``, "missing one of"},
		{"missing allocation", `"allocation": [],`, ``, "missing one of"},
		{"bad kind", `{"kind": "linear"}`, `{"kind": "cubic"}`, "unknown kind"},
		{"short params", `[0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.5]`, `[0.1, 0.01]`, "perf_params has 2"},
		{"bad gamma", `0.01, 1.5]`, `0.01, 11]`, "gamma"},
		{"fractional batch", `"init_batch_size": 128`, `"init_batch_size": 12.5`, "not a positive integer"},
		{"two gpus per replica", `"resources": {"nvidia.com/gpu": 1}`, `"resources": {"nvidia.com/gpu": 2}`, "one GPU per replica"},
		{"job count", `"n_jobs": 2`, `"n_jobs": 3`, "meta says 3 jobs"},
		{"bad node gpus", `"resources": {"nvidia.com/gpu": 4}, "preemptible": false},
           {"name": 0`, `"resources": {"nvidia.com/gpu": -4}, "preemptible": false},
           {"name": 0`, "nvidia.com/gpu is -4"},
		{"max below min", `"min_replicas": 0, "max_replicas": 1`, `"min_replicas": 2, "max_replicas": 1`, "replicas [2, 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := strings.Replace(goodSnap, tt.old, tt.new, 1)
			if in == goodSnap {
				t.Fatal("test edit did not apply")
			}
			_, _, err := Decode(strings.NewReader(in))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want ErrFormat containing %q", err, tt.want)
			}
		})
	}
}

func TestLoadDirErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadDir(dir); !errors.Is(err, ErrNoSnapshots) {
		t.Errorf("empty dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "snap-a.json"), []byte(goodSnap), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "reference-fitness.json") {
		t.Errorf("missing reference: %v", err)
	}
	ref := `{"snap-b": {"n_jobs": 2, "current_allocation_fitness": 0.1, "reference_ga_fitness_seeds_0_4": [0.2], "reference_ga_fitness_median": 0.2}}`
	if err := os.WriteFile(filepath.Join(dir, "reference-fitness.json"), []byte(ref), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "snap-a has no entry") {
		t.Errorf("unmatched snapshot: %v", err)
	}
	ref = strings.Replace(ref, "snap-b", "snap-a", 1)
	if err := os.WriteFile(filepath.Join(dir, "reference-fitness.json"), []byte(ref), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := LoadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name != "snap-a" || entries[0].Reference.GAFitnessMed != 0.2 {
		t.Errorf("LoadDir = %+v, %v", entries, err)
	}
}

// FuzzDecode checks that no input makes Decode panic and that whatever it
// accepts is a snapshot the objective can evaluate.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(goodSnap))
	f.Add([]byte(`{"meta": {}, "nodes": [], "jobs": []}`))
	f.Add([]byte(`{"meta": {"n_jobs": 0}, "nodes": [{"name": "x", "resources": {"nvidia.com/gpu": 2}}], "jobs": []}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, _, err := Decode(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if snap.TotalGPUs() == 0 {
			return
		}
		obj, err := optimizer.NewObjective(snap, optimizer.DefaultPowerMean)
		if err != nil {
			return
		}
		cur := make([]optimizer.Placement, len(snap.Jobs))
		for j := range cur {
			cur[j] = snap.Jobs[j].Current
		}
		if v := obj.Fitness(cur); math.IsNaN(v) || v < 0 {
			t.Fatalf("fitness %v", v)
		}
	})
}
