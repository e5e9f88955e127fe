package builtin

import (
	"bytes"
	"errors"
	"math"
	"pollux/testbed/artifact"
	"testing"
)

func TestCatalog(t *testing.T) {
	cat, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"} {
		app, ok := cat[name]
		if !ok {
			t.Fatalf("%s missing", name)
		}
		l := app.Limits()
		// One replica is slower per step than eight, but eight process
		// more samples per second.
		s1, sync1 := app.StepTimes([]int{1}, float64(l.MinLocal))
		s8, _ := app.StepTimes([]int{4, 4}, float64(l.MinLocal))
		if !(s1 > 0) || sync1 < 0 || sync1 >= s1 || !(8/s8 > 1/s1) {
			t.Errorf("%s: step %v sync %v, 8 GPUs %v", name, s1, sync1, s8)
		}
		// Efficiency of the largest batch is below 1 and grows over
		// training for every profile (the noise scale rises).
		e0 := app.GradStats(0, 0).Efficiency(float64(l.MaxBatch), float64(l.InitBatch))
		eN := app.GradStats(0, app.MaxEpochs()-1).Efficiency(float64(l.MaxBatch), float64(l.InitBatch))
		if !(e0 > 0 && e0 < 1) || math.IsNaN(eN) {
			t.Errorf("%s: efficiency %v -> %v", name, e0, eN)
		}
		if app.EpochEnd(app.MaxEpochs()) <= app.EpochEnd(1) {
			t.Errorf("%s: epoch ends not increasing", name)
		}
		// At M0 an iteration is one step of progress.
		it := app.Iterations(float64(l.InitBatch), 1)
		if math.Abs(it-app.EpochEnd(1)) > 1e-9*it {
			t.Errorf("%s: iterations at M0 %v, want %v", name, it, app.EpochEnd(1))
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ name, body string }{
		{"not json", "{"},
		{"empty", "[]"},
		{"null", "[null]"},
		{"no epochs", `[{"application":"x","epochs":0}]`},
		{"bad params", `[{"application":"x","epochs":1,"steps_per_epoch":1,"limits":{"init_batch_size":1,"max_batch_size":2,"min_local_bsz":1,"max_local_bsz":2}}]`},
	}
	for _, tt := range tests {
		if _, err := Decode([]byte(tt.body)); !errors.Is(err, ErrBadProfile) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(string(profilesJSON))
	f.Add(`[{"application":"x","epochs":1}]`)
	f.Fuzz(func(t *testing.T, body string) {
		cat, err := Decode([]byte(body))
		if err != nil {
			return
		}
		for _, app := range cat {
			if err := app.(*Profile).Validate(); err != nil {
				t.Fatalf("accepted invalid profile: %v", err)
			}
		}
	})
}

// The embedded profiles are what the committed derivation makes of the
// artifact's traces.
func TestDeriveReproducesEmbedded(t *testing.T) {
	dir := artifact.Need(t, "pollux-artifact", "traces")
	ps, err := Derive(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Encode(ps)
	if err != nil {
		t.Fatal(err)
	}
	if want := bytes.TrimSpace(profilesJSON); !bytes.Equal(got, want) {
		t.Errorf("profiles.json is stale: rerun go run ./testbed/builtin/gen")
	}
}
