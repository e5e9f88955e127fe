package emulator

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pollux/internal/usage"
	"pollux/testbed/chaos/record"
)

// lookup is an environment of vars ("K=V").
func lookup(vars []string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for _, kv := range vars {
			if key, v, _ := strings.Cut(kv, "="); key == k {
				return v, true
			}
		}
		return "", false
	}
}

// A worker process given bad input exits with it marked as such, and
// under the harness records its start and an exit code of 2; without a
// usable environment it records nothing.
func TestProcessBadInput(t *testing.T) {
	good := env(t.TempDir(), "127.0.0.1:1").Environ()
	for _, tc := range []struct {
		name     string
		o        ProcessOptions
		want     string
		recorded bool
	}{
		{"no environment", ProcessOptions{App: "cifar10", TimeScale: 1, LookupEnv: lookup(nil)}, "POLLUX_", false},
		{"unknown application", ProcessOptions{App: "resnet", TimeScale: 1, LookupEnv: lookup(good)}, `unknown application "resnet"`, true},
		{"time scale", ProcessOptions{App: "cifar10", TimeScale: 0, LookupEnv: lookup(good)}, "--time-scale 0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir() // records of the agent n1 in dir/n1
			if err := os.Mkdir(filepath.Join(dir, "n1"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv(record.EnvDir, filepath.Join(dir, "n1"))
			var log bytes.Buffer
			tc.o.Log = &log
			err := Process(context.Background(), tc.o)
			if !errors.Is(err, usage.ErrBadSetting) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want bad input with %q", err, tc.want)
			}
			ws, rerr := record.ReadRoot(dir)
			if !tc.recorded {
				if entries, _ := os.ReadDir(filepath.Join(dir, "n1")); len(entries) > 0 {
					t.Errorf("recorded %d files without an environment", len(entries))
				}
				return
			}
			if rerr != nil || len(ws) != 1 {
				t.Fatalf("records: %v, %d workers", rerr, len(ws))
			}
			exit, ok := ws[0].Find(record.Exit)
			if !ok || exit.Code != 2 {
				t.Errorf("exit record %+v (found %v), want code 2", exit, ok)
			}
		})
	}
}
