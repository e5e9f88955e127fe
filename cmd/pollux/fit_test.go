package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"pollux/testbed/artifact"
	"testing"
)

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFitJSONShape(t *testing.T) {
	fitTraces := artifact.Need(t, "pollux-artifact", "traces")
	dir := t.TempDir()
	if err := os.Symlink(mustAbs(t, filepath.Join(fitTraces, "yolov3")), filepath.Join(dir, "yolov3")); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"fit", "--traces", dir, "--json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Apps map[string]map[string]json.RawMessage `json:"apps"`
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if dec.More() {
		t.Fatal("stdout holds more than one JSON value")
	}
	for _, k := range []string{"params", "mean_rel_err", "max_rel_err", "loo_mean_rel_err"} {
		if _, ok := got.Apps["yolov3"][k]; !ok {
			t.Errorf("yolov3 report lacks %q", k)
		}
	}
	var loo float64
	if err := json.Unmarshal(got.Apps["yolov3"]["loo_mean_rel_err"], &loo); err != nil {
		t.Fatal(err)
	}
	// Predicting an unseen placement: within 12 % on average.
	if loo <= 0 || loo > 0.12 {
		t.Errorf("yolov3 leave-one-placement-out error %.3f outside (0, 0.12]", loo)
	}
}

func TestFitBadInput(t *testing.T) {
	dir := t.TempDir()
	app := filepath.Join(dir, "bad")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "placements.csv"), []byte("placement,local_bsz,step_time,sync_time\n1,4,abc,0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"fit"},
		{"fit", "--traces", filepath.Join(dir, "missing")},
		{"fit", "--traces", dir},
	} {
		if code := run(args); code != 2 {
			t.Errorf("pollux %v exited %d, want 2", args, code)
		}
	}
}
