package worker

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oneRank is a single-replica run of the MLP example.
func oneRank(job, dir, addr string, args ...string) run {
	return run{job: job, incarnation: 1, replicas: 1, initBatch: 32, atomicBatch: 32,
		dir: dir, reportAddr: addr, args: append([]string{"--model", "mlp"}, args...)}
}

// exitOf waits for a single worker and returns its exit code and output.
func exitOf(t *testing.T, ws []*worker) (int, string) {
	t.Helper()
	select {
	case <-ws[0].done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("worker still running; output:\n%s", tail(ws[0].out.String()))
	}
	var ee *exec.ExitError
	if errors.As(ws[0].err, &ee) {
		return ee.ExitCode(), ws[0].out.String()
	}
	if ws[0].err != nil {
		t.Fatal(ws[0].err)
	}
	return 0, ws[0].out.String()
}

// TestIncompleteEnvironmentExitsAtOnce: a worker missing a variable, or
// given one out of range, exits with status 2 naming it, before it
// touches its checkpoint directory or its report address.
func TestIncompleteEnvironmentExitsAtOnce(t *testing.T) {
	l := library(t)
	s := newSink(t)
	for _, tc := range []struct{ name, set string }{
		{"POLLUX_REPORT_ADDR", ""},
		{"POLLUX_ACCUM_STEPS", "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			env := cleanEnv()
			r := oneRank("digits-env", dir, s.addr())
			e := envOf(r, 0)
			for _, kv := range e.Environ() {
				if strings.HasPrefix(kv, tc.name+"=") {
					if tc.set == "" {
						continue
					}
					kv = tc.name + "=" + tc.set
				}
				env = append(env, kv)
			}
			cmd := exec.Command(Python, append([]string{l.Digits}, r.args...)...)
			cmd.Env = env
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; output:\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "bad environment") || !strings.Contains(out.String(), tc.name) {
				t.Errorf("output does not name %s:\n%s", tc.name, out.String())
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("checkpoint directory touched: %v", err)
			}
		})
	}
	if n := s.connections(); n != 0 {
		t.Errorf("%d report connections from workers with a bad environment", n)
	}
}

// TestBadCheckpointIsAnErrorNamingTheFile: a truncated checkpoint, one of
// another model and one of another job each end the worker non-zero with
// a message naming the file; the file and the previous checkpoint are left
// exactly as they were.
func TestBadCheckpointIsAnErrorNamingTheFile(t *testing.T) {
	l := library(t)
	s := newSink(t)
	good := t.TempDir()
	// Two epochs: the epoch-end and final checkpoints leave a previous one.
	wait(t, start(t, l, oneRank("digits-ck", good, s.addr(), "--max-epochs", "2", "--min-epochs", "2")), 2*time.Minute)
	ckpt := filepath.Join(good, "pollux-checkpoint.pt")
	prev := filepath.Join(good, "pollux-checkpoint.prev.pt")
	goodBytes, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	prevBytes, err := os.ReadFile(prev)
	if err != nil {
		t.Fatalf("no previous checkpoint kept: %v", err)
	}
	for _, tc := range []struct {
		name    string
		damage  func([]byte) []byte
		job     string
		args    []string
		mention string
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, "digits-ck", nil, "does not load"},
		{"another model", nil, "digits-ck", []string{"--model", "cnn"}, "does not fit"},
		{"another job", nil, "digits-other", nil, "belongs to job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cur := goodBytes
			if tc.damage != nil {
				cur = tc.damage(goodBytes)
			}
			path := filepath.Join(dir, "pollux-checkpoint.pt")
			if err := os.WriteFile(path, cur, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "pollux-checkpoint.prev.pt"), prevBytes, 0o644); err != nil {
				t.Fatal(err)
			}
			r := oneRank(tc.job, dir, s.addr(), tc.args...)
			code, out := exitOf(t, start(t, l, r))
			if code == 0 {
				t.Fatalf("worker exited 0 on a bad checkpoint; output:\n%s", tail(out))
			}
			if !strings.Contains(out, path) || !strings.Contains(out, tc.mention) {
				t.Errorf("output does not name %s with %q:\n%s", path, tc.mention, tail(out))
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, cur) {
				t.Error("the bad checkpoint was rewritten")
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "pollux-checkpoint.prev.pt")); !bytes.Equal(after, prevBytes) {
				t.Error("the previous checkpoint was not kept")
			}
		})
	}
}

// TestDivergingModelSendsNoNaN: a learning rate of 1e20 makes the MLP's
// gradients non-finite. Reports keep coming (every step) and every one
// decodes (the sink fails the test on a refused line); the worker logs
// the divergence and, after 20 such steps in a row, exits non-zero.
func TestDivergingModelSendsNoNaN(t *testing.T) {
	l := library(t)
	s := newSink(t)
	code, out := exitOf(t, start(t, l, oneRank("digits-nan", t.TempDir(), s.addr(), "--lr", "1e20", "--report-every", "0")))
	if code == 0 || !strings.Contains(out, "training diverges") || !strings.Contains(out, "training diverged") {
		t.Errorf("exit %d, want non-zero with the divergence logged; output:\n%s", code, tail(out))
	}
	if n := len(s.all()); n < 5 {
		t.Errorf("%d reports, want one per step after the first ones", n)
	}
}
