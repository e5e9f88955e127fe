package tracefit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/internal/usage"
	"pollux/testbed/artifact"
)

// The paper reports the throughput model within 10 % of measured step
// times; hold every artifact application to that.
func TestFitArtifactTraces(t *testing.T) {
	fitTraces := artifact.Need(t, "pollux-artifact", "traces")
	for _, a := range []string{"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"} {
		// Leave-one-out costs one fit per placement: check it on the
		// smallest application only (TestFitJSONShape), in-sample on all.
		r, err := App(filepath.Join(fitTraces, a), 2, false)
		if err != nil {
			t.Fatal(err)
		}
		if r.MeanRelErr > 0.10 {
			t.Errorf("%s: mean relative error %.3f > 0.10", a, r.MeanRelErr)
		}
		if err := r.Params.Validate(); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}

// A directory without applications, or an unreadable one, is bad input.
func TestAppsBadInput(t *testing.T) {
	empty := t.TempDir()
	if err := os.Mkdir(filepath.Join(empty, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{empty, filepath.Join(empty, "absent")} {
		var progress bytes.Buffer
		if _, err := Apps(dir, 1, &progress); !errors.Is(err, usage.ErrBadSetting) || !strings.HasPrefix(err.Error(), "fit: ") {
			t.Errorf("Apps(%s) = %v, want bad input", dir, err)
		}
	}
	if _, err := App(empty, 1, false); !errors.Is(err, usage.ErrBadSetting) {
		t.Errorf("App of a directory without traces = %v, want bad input", err)
	}
}
