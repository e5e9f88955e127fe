package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonUnitTests runs the library's own unittest files (noise
// estimator, elastic data order, checkpoints, environment, reports,
// learning-rate rules, the Accumulator, and replicas under
// DistributedDataParallel with accumulation and mixed precision checked
// against their micro-batch gradients) and logs the tests they skipped
// (mixed precision on a machine without CUDA) with the reason.
func TestPythonUnitTests(t *testing.T) {
	l := library(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Python, "-m", "unittest", "discover", "-v", "-s", l.Tests)
	cmd.Dir = l.Dir
	cmd.Env = append(cleanEnv(), "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		if strings.Contains(line, " ... skipped ") {
			t.Log(line)
		}
	}
	t.Log(strings.Join(lines[max(0, len(lines)-3):], " | "))
}

func TestInstallWritesTheLibrary(t *testing.T) {
	l, err := Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{l.Digits, l.Dir + "/train_lm.py", l.Dir + "/pollux_worker/__init__.py", l.Dir + "/pollux_worker/job.py", l.Tests + "/test_noise.py"} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s missing after Install: %v", f, err)
		}
	}
}

func TestExampleSpecsValidate(t *testing.T) {
	l := Layout{Dir: "/opt/pw", Digits: "/opt/pw/train_digits.py"}
	for _, e := range Examples {
		s, err := e.Spec("digits-"+e.Model, l, "/ck/"+e.Model, "--min-epochs", "3")
		if err != nil {
			t.Errorf("%s: %v", e.Model, err)
			continue
		}
		want := []string{Python, filepath.Join(l.Dir, e.Script), "--model", e.Model}
		if strings.Join(s.Command[:4], " ") != strings.Join(want, " ") || s.Command[len(s.Command)-1] != "3" {
			t.Errorf("%s: command %q", e.Model, s.Command)
		}
	}
}

func TestCheckPythonNamesThePackages(t *testing.T) {
	for _, py := range []string{"/nonexistent/python3", "/bin/false"} {
		err := CheckInterpreter(context.Background(), py)
		if !errors.Is(err, ErrNoPython) || !strings.Contains(err.Error(), InstallHint) || !strings.Contains(err.Error(), py) {
			t.Errorf("CheckInterpreter(%s) = %v, want ErrNoPython naming %q and the interpreter", py, err, InstallHint)
		}
	}
}

func TestExampleReached(t *testing.T) {
	acc := Example{Metric: "accuracy", Target: 0.97}
	loss := Example{Metric: "loss", Target: 1.6}
	for _, c := range []struct {
		e    Example
		v    float64
		want bool
	}{
		{acc, 0.98, true}, {acc, 0.97, true}, {acc, 0.5, false},
		{loss, 1.5, true}, {loss, 1.6, true}, {loss, 2.1, false},
	} {
		if got := c.e.Reached(c.v); got != c.want {
			t.Errorf("%s target %v: Reached(%v) = %v, want %v", c.e.Metric, c.e.Target, c.v, got, c.want)
		}
	}
}
