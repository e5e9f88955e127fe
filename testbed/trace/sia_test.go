package trace

import (
	"errors"
	"math"
	"testing"

	"pollux/testbed"
	"pollux/testbed/artifact"
)

// Sia's artifact: the three GPU types of its heterogeneous cluster load,
// with the per-type constants its simulator uses.
func TestSiaTypedTraces(t *testing.T) {
	dir := artifact.Need(t, "sia-artifact", "traces")
	apps := []string{"bert", "cifar10", "deepspeech2", "imagenet", "yolov3"}
	cat, err := LoadTyped(dir, []string{"aws", "rtx", "dgx-ext"}, apps)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		typ, app           string
		nodes, maxLocal, k int
	}{
		{"aws", "yolov3", 16, 16, 1},
		{"rtx", "deepspeech2", 3, 57, 1},
		{"rtx", "yolov3", 3, 8, 1},
		{"dgx-ext", "cifar10", 2, 4096, 1},
	}
	for _, tt := range tests {
		a := cat[tt.typ][tt.app].(*App)
		if a.Type() != tt.typ || a.ProfiledNodes() != tt.nodes || a.Limits().MaxLocal != tt.maxLocal {
			t.Errorf("%s/%s: type %q nodes %d max local %d, want %d and %d", tt.typ, tt.app, a.Type(), a.ProfiledNodes(), a.Limits().MaxLocal, tt.nodes, tt.maxLocal)
		}
		if !(a.OneGPUThroughput() > 0) {
			t.Errorf("%s/%s: one-GPU throughput %v", tt.typ, tt.app, a.OneGPUThroughput())
		}
	}
	// A100s are faster than T4s on every application.
	for _, app := range apps {
		t4 := cat["aws"][app].(testbed.TypeProfile).OneGPUThroughput()
		a100 := cat["dgx-ext"][app].(testbed.TypeProfile).OneGPUThroughput()
		if !(a100 > t4) {
			t.Errorf("%s: a100 %v not faster than t4 %v", app, a100, t4)
		}
	}
	// gpt_pmp was profiled on rtx and dgx-ext only.
	if _, err := LoadTyped(dir, []string{"aws"}, []string{"gpt_pmp"}); !errors.Is(err, ErrNoTraces) {
		t.Errorf("gpt_pmp on aws: %v, want ErrNoTraces", err)
	}
}

// An unmeasured placement is interpolated over the Delaunay
// tetrahedralisation of the measured (N, K, m) points, as the artifact's
// scipy LinearNDInterpolator does. The expected values were computed with
// scipy 1.10.1 (LinearNDInterpolator on the same points); at this point
// the containing Delaunay simplex is unique.
func TestDelaunayMatchesScipy(t *testing.T) {
	dir := artifact.Need(t, "pollux-artifact", "traces")
	cat, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	step, sync := cat["cifar10"].StepTimes([]int{4, 4, 4, 2, 2}, 256)
	if math.Abs(step-0.22946795) > 1e-8 || math.Abs(sync-0.02213091) > 1e-8 {
		t.Errorf("cifar10 22444 m=256: %v %v, want 0.22946795 0.02213091", step, sync)
	}
}
