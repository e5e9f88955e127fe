package simrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pollux/internal/usage"
	"pollux/optimizer"
)

// options are a run of tiresias (fast) on the tiny workload, the policy
// list's callback recording that it was called.
func options(calls *[]string) Options {
	return Options{Workload: "testdata/tiny.csv", Semantics: "auto", Nodes: 4, GPUsPerNode: 4, Interval: time.Minute, P: -1, Seed: 1,
		Parallel: 1, Racks: 1, Oversubscription: 2,
		Policies: func(types int, typed bool) ([]string, error) {
			*calls = append(*calls, "policies")
			if types != 1 || typed {
				return nil, usage.Errorf("types %d, typed %v", types, typed)
			}
			return []string{"tiresias"}, nil
		}}
}

func TestRunJSON(t *testing.T) {
	var calls []string
	o := options(&calls)
	o.JSON = true
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs []struct {
			Policy   string `json:"policy"`
			Workload string `json:"workload"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || len(got.Runs) != 1 || got.Runs[0].Policy != "tiresias" || got.Runs[0].Workload != "tiny" {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if strings.Join(calls, ",") != "policies" {
		t.Errorf("callbacks %v, want the policies expanded once", calls)
	}
	if !strings.Contains(stderr.String(), "simulated 1 runs") {
		t.Errorf("stderr %q lacks the timing line", stderr.String())
	}
}

// Bad options are refused as bad input before any run, with the
// message the command prints.
func TestRunBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"unknown cluster preset", func(o *Options) { o.Cluster = "no-such" }, "sim: "},
		{"semantics", func(o *Options) { o.Semantics = "other" }, "--semantics"},
		{"policies", func(o *Options) {
			o.Policies = func(int, bool) ([]string, error) { return nil, usage.Errorf("sim: unknown policy") }
		}, "unknown policy"},
		{"oversubscription", func(o *Options) { o.Oversubscription = 0.5 }, "--oversubscription 0.5"},
		{"node bandwidth", func(o *Options) { o.NodeBandwidth = math.Inf(1) }, "--node-bandwidth +Inf"},
		{"zero racks", func(o *Options) { o.Racks = 0 }, "--racks 0"},
		{"compare on one rack", func(o *Options) { o.CompareTopology = true }, "--compare-topology"},
		{"p", func(o *Options) { o.P = math.NaN() }, "--p"},
		{"parallel", func(o *Options) { o.Parallel = 0 }, "--parallel 0"},
		{"workload", func(o *Options) { o.Workload = "testdata/absent.csv" }, "absent.csv"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			o := options(&calls)
			tc.edit(&o)
			var stderr bytes.Buffer
			err := Run(context.Background(), o, &bytes.Buffer{}, &stderr)
			if !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want bad input with %q", err, tc.want)
			}
			if stderr.Len() > 0 {
				t.Errorf("a run started: %s", stderr.String())
			}
		})
	}
}

func TestCloudBadInput(t *testing.T) {
	good := CloudOptions{GPUsPerNode: 4, Parallel: 1, Interval: time.Minute, P: -1, MinNodes: 0, MaxNodes: 4, NodeCost: 1,
		Threshold: 0.5, LowUtil: 0.5, HighUtil: 0.8}
	for _, tc := range []struct {
		name string
		edit func(*CloudOptions)
		want string
	}{
		{"GPU type without a cluster", func(o *CloudOptions) { o.GPUType = "aws" }, "--node-gpu-type aws needs --cluster"},
		{"negative minimum", func(o *CloudOptions) { o.MinNodes = -1 }, "--min-nodes -1"},
		{"minimum above maximum", func(o *CloudOptions) { o.MinNodes = 5 }, "above --max-nodes"},
		{"negative boot delay", func(o *CloudOptions) { o.BootDelay = -time.Second }, "--boot-delay"},
		{"threshold", func(o *CloudOptions) { o.Threshold = 0 }, "--scaling-threshold"},
		{"utility band", func(o *CloudOptions) { o.LowUtil = 0.9 }, "--low-util"},
		{"parallel", func(o *CloudOptions) { o.Parallel = 0 }, "--parallel 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			o.Policies = func(bool) ([]string, error) { return []string{"fixed"}, nil }
			o.NewPolicy = func(string, int, optimizer.Node, bool) (optimizer.Policy, error) {
				t.Fatal("a policy was built")
				return nil, nil
			}
			tc.edit(&o)
			if err := Cloud(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want bad input with %q", err, tc.want)
			}
		})
	}
}

func TestFederationBadInput(t *testing.T) {
	for _, o := range []FederationOptions{
		{File: Example, Parallel: 0},
		{File: "testdata/absent.json", Parallel: 1},
		{File: Example, Workload: "testdata/tiny.csv", Parallel: 1},
	} {
		if err := Federation(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, usage.ErrBadSetting) {
			t.Errorf("%+v: err = %v, want bad input", o, err)
		}
	}
}

// A directory of workload directories is a sweep: --out draws its
// average JCT per point, the ground truth's point beside it.
func TestRunSweepOut(t *testing.T) {
	root, out := t.TempDir(), t.TempDir()
	tiny, err := os.ReadFile("testdata/tiny.csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"rate_10", "rate_20"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, d, "workload-1.csv"), tiny, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	truth := filepath.Join(root, "truth.json")
	if err := os.WriteFile(truth, []byte(`{"runs": [{"policy": "sia", "workload": "scale/rate_10/workload-1", "solver": "cbc", "avg_jct_h": 0.5}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var calls []string
	o := options(&calls)
	o.Workload, o.Out, o.GroundTruth, o.JSON = root, out, truth, true
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), o, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), `"workload": "rate_20/workload-1"`) {
		t.Errorf("summary lacks the sweep's workload names: %s", stdout.String())
	}
	for _, f := range []string{"sweep-avg-jct.png", "gpus-rate_10_workload-1.png", "index.html"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("--out: %v", err)
		}
	}
}
