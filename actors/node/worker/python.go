package worker

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Python is the interpreter real workers run with: Debian's, which has
// python3-torch and python3-sklearn.
const Python = "/usr/bin/python3"

// InstallHint is the command that provides what CheckPython looks for.
const InstallHint = "apt-get install -y python3-torch python3-sklearn"

// ErrNoPython is returned by CheckPython when Python cannot run the
// library.
var ErrNoPython = errors.New("worker: no usable Python for the worker library")

//go:embed python/pollux_worker/*.py python/*.py python/tests/*.py
var sources embed.FS

// Layout is where Install put the library.
type Layout struct {
	// Python is the interpreter that runs the scripts (empty: Python).
	Python string
	// Dir holds the package pollux_worker and the example scripts.
	Dir string
	// Digits is the example script train_digits.py.
	Digits string
	// Tests is the directory of the library's Python unit tests.
	Tests string
}

// Install writes the library, the example scripts and the Python tests
// into dir (created if missing; existing files are overwritten).
func Install(dir string) (Layout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Layout{}, fmt.Errorf("worker: install dir: %w", err)
	}
	err = fs.WalkDir(sources, "python", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := sources.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(abs, strings.TrimPrefix(path, "python/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return Layout{}, fmt.Errorf("worker: installing the library into %s: %w", abs, err)
	}
	return Layout{Python: Python, Dir: abs, Digits: filepath.Join(abs, "train_digits.py"), Tests: filepath.Join(abs, "tests")}, nil
}

// CheckPython reports whether Python imports torch and sklearn. The error
// wraps ErrNoPython and names InstallHint.
func CheckPython(ctx context.Context) error { return CheckInterpreter(ctx, Python) }

// CheckInterpreter is CheckPython for another interpreter.
func CheckInterpreter(ctx context.Context, python string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", "import torch, sklearn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%w: %s cannot import torch and sklearn (%s); install them with `%s`",
			ErrNoPython, python, msg, InstallHint)
	}
	return nil
}
