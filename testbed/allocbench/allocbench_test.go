package allocbench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"pollux/internal/usage"
)

func TestSynthetic(t *testing.T) {
	rep, err := Synthetic(Options{GPUs: 16, Rounds: 2, Seed: 1, Racks: 2, CrossRackRatio: 2, CompareFlat: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GPUsPerNode != 4 || rep.Jobs != 8 || rep.Nodes != 4 || rep.Racks != 2 || rep.CompareFlat == nil || rep.Fitness <= 0 || rep.MedianS <= 0 {
		t.Errorf("report %+v", rep)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.Contains(lines[2], "flat") {
		t.Errorf("table (header, searched rounds, flat rounds):\n%s", out.String())
	}
}

func TestSyntheticBadInput(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "give --gpus G"},
		{Options{GPUs: 8, Rounds: 0, Racks: 1, CrossRackRatio: 2}, "--rounds 0"},
		{Options{GPUs: 8, Rounds: 1, Racks: 1, CrossRackRatio: 0.5}, "--cross-rack-ratio 0.5"},
		{Options{GPUs: 8, Rounds: 1, Racks: 1, CrossRackRatio: 2, CompareFlat: true}, "--compare-flat needs --racks"},
		{Options{GPUs: 8, Rounds: 1, Racks: 9, CrossRackRatio: 2}, "--racks"},
	} {
		if _, err := Synthetic(tc.o); !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want bad input with %q", tc.o, err, tc.want)
		}
	}
}

func TestSnapshotsAndSiaScaleBadInput(t *testing.T) {
	if err := Snapshots(&bytes.Buffer{}, t.TempDir(), 0, false); !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), "--seeds 0") {
		t.Errorf("no seeds: %v", err)
	}
	if err := Snapshots(&bytes.Buffer{}, t.TempDir()+"/absent", 1, false); !errors.Is(err, usage.ErrBadSetting) {
		t.Errorf("absent directory: %v", err)
	}
	for _, o := range []SiaScaleOptions{{Scale: 65}, {Scale: 1, MaxRounds: -1}, {Scale: 1, Dir: t.TempDir(), Workload: "workload-1"}} {
		if err := SiaScale(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, usage.ErrBadSetting) {
			t.Errorf("%+v: err = %v, want bad input", o, err)
		}
	}
}
