package realdemo

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pollux/actors/node/worker"
	"pollux/actors/server/api"
	"pollux/internal/cpuset"
	"pollux/optimizer/goodput"
)

func TestCompareWorkload(t *testing.T) {
	jobs := CompareWorkload(10*time.Second, 4, 0)
	if len(jobs) != 4 || jobs[3].Example.Metric != "loss" || jobs[3].Example.Target != CompareLMTarget || jobs[3].After != 30*time.Second {
		t.Fatalf("workload %+v", jobs)
	}
	if lm := CompareWorkload(10*time.Second, 4, 2.5)[3]; lm.Example.Target != 2.5 {
		t.Errorf("language model's target %v, want 2.5", lm.Example.Target)
	}
	l := worker.Layout{Dir: "/w", Digits: "/w/train_digits.py"}
	for _, j := range jobs {
		if want := map[string]int{"cnn": 128, "mlp": 128, "transformer": 32}[j.Example.Model]; j.UserBatch != want {
			t.Errorf("%s: user batch %d, want %d (the measured best)", j.Name, j.UserBatch, want)
		}
		s, err := j.Example.Spec(j.Name, l, "/ck/"+j.Name, j.Args...)
		if err != nil {
			t.Fatalf("%s: %v", j.Name, err)
		}
		// The jobs train until their targets: no minimum epochs.
		cmd := strings.Join(s.Command, " ")
		want := map[string]float64{"cnn": CompareCNNTarget, "mlp": CompareMLPTarget, "transformer": CompareLMTarget}[j.Example.Model]
		if strings.Contains(cmd, "--min-epochs") || !strings.Contains(cmd, fmt.Sprintf("--target %v", want)) ||
			(j.Example.Model == "cnn" && !strings.Contains(cmd, "--augment 4 ")) || (j.Example.Model == "mlp" && !strings.Contains(cmd, "--augment 16 ")) {
			t.Errorf("%s: command %q", j.Name, cmd)
		}
		for _, f := range []Fixed{{1, 32}, {2, 64}, {4, 512}} {
			fs, err := f.apply(s)
			if err != nil {
				t.Errorf("%s user-sized %+v: %v", j.Name, f, err)
				continue
			}
			if fs.MinReplicas != f.Replicas || fs.MaxReplicas != f.Replicas || fs.MaxBatch != f.Batch ||
				fs.MinLocalBatch != f.Batch/f.Replicas || fs.Accumulation {
				t.Errorf("%s user-sized %+v: spec %+v", j.Name, f, fs)
			}
		}
		if _, err := (Fixed{3, 64}).apply(s); err == nil {
			t.Errorf("%s: a batch of 64 on 3 replicas accepted", j.Name)
		}
	}
}

// TestChoose checks the careful user's choice: the measured best batch,
// on the most replicas that its throughput profile says still scale at
// MinEfficiency; one replica without a profile. The gradient statistics
// play no part.
func TestChoose(t *testing.T) {
	ex := worker.Examples[1] // the CNN: M0 32, local 8-256
	if got := Choose(ex, 128, nil, 2, 2); got != (Fixed{1, 128}) {
		t.Errorf("without a bid: %+v", got)
	}
	if got := Choose(ex, 0, nil, 2, 2); got != (Fixed{1, 32}) {
		t.Errorf("without a batch: %+v, want M0 on one replica", got)
	}
	cheapSync := goodput.Params{AlphaC: 0.01, BetaC: 0.002, AlphaN: 0.002, BetaN: 0.0002, AlphaR: 0.02, BetaR: 0.001, Gamma: 1.2}
	costlySync := cheapSync
	costlySync.AlphaR, costlySync.AlphaN = 2, 1 // a second of sync per step on two replicas
	tiny := goodput.GradStats{GradSqr: 1, GradVar: 0.001}
	huge := goodput.GradStats{GradSqr: 1, GradVar: 1e6}
	for _, tc := range []struct {
		name   string
		params goodput.Params
		batch  int
		want   Fixed
	}{
		{"cheap sync scales out", cheapSync, 128, Fixed{4, 128}},
		{"rounded to the replicas", cheapSync, 130, Fixed{4, 132}},
		{"costly sync stays on one", costlySync, 128, Fixed{1, 128}},
		{"a local batch below the least stays on fewer", cheapSync, 24, Fixed{3, 24}},
	} {
		for _, g := range []goodput.GradStats{tiny, huge} {
			p, g := tc.params, g
			ex := ex
			if tc.batch < ex.InitBatch {
				ex.InitBatch = 8
			}
			got := Choose(ex, tc.batch, &api.BidJSON{Model: &p, Grad: &g}, 2, 2)
			if got != tc.want {
				t.Errorf("%s (noise %v): %+v, want %+v", tc.name, g.GradVar, got, tc.want)
			}
		}
	}
}

func TestLossTarget(t *testing.T) {
	at := JobResult{Loss: 1.79, Target: 1.8, Metric: "loss"}
	above := JobResult{Loss: 1.85, Target: 1.8, Metric: "loss"}
	if !at.Reached() || above.Reached() {
		t.Errorf("loss 1.79 reached %v, 1.85 reached %v (target 1.8)", at.Reached(), above.Reached())
	}
	err := Result{Jobs: map[string]JobResult{"lm": above}}.check(false)
	if !errors.Is(err, ErrShort) {
		t.Errorf("check = %v", err)
	}
}

// TestComparisonJSON checks the fields of `pollux demo --real --compare
// --json`.
func TestComparisonJSON(t *testing.T) {
	c := Comparison{Ratio: 0.7, Policies: map[string]PolicyResult{
		"pollux": {AvgJCT: 70, Jobs: map[string]JobResult{"lm": {Loss: 1.7, Target: 1.8, Metric: "loss", Replicas: []int{1}, BatchSizes: []int{32}}}},
		"tiresias": {AvgJCT: 100, Fixed: map[string]Fixed{"lm": {2, 64}},
			Jobs: map[string]JobResult{"cnn": {Accuracy: 0.98, Target: 0.97, Replicas: []int{2}, BatchSizes: []int{64}}}},
	}}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Policies map[string]struct {
			AvgJCT float64                               `json:"avg_jct_s"`
			Jobs   map[string]map[string]json.RawMessage `json:"jobs"`
		} `json:"policies"`
		Ratio float64 `json:"ratio"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	lm := slices.Sorted(maps.Keys(raw.Policies["pollux"].Jobs["lm"]))
	cnn := slices.Sorted(maps.Keys(raw.Policies["tiresias"].Jobs["cnn"]))
	if !slices.Equal(lm, []string{"batch_sizes", "incarnations", "jct_s", "loss", "replicas", "target"}) ||
		!slices.Equal(cnn, []string{"accuracy", "batch_sizes", "incarnations", "jct_s", "replicas", "target"}) ||
		raw.Ratio != 0.7 || raw.Policies["tiresias"].AvgJCT != 100 {
		t.Errorf("JSON %s", b)
	}
}

// A comparison's default slots are the cores of an agent's share: as
// many as there are cores per agent, one with more agents than cores.
func TestCoreSlots(t *testing.T) {
	all, err := cpuset.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	for _, agents := range []int{1, 2, len(all) + 1} {
		got, err := CoreSlots(agents)
		if want := max(len(all)/agents, 1); err != nil || got != want {
			t.Errorf("CoreSlots(%d) on %d cores = %d, %v; want %d", agents, len(all), got, err, want)
		}
	}
}
