package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"pollux/internal/usage"
)

// TestConfigFiles runs pollux server and agent with --config and
// --print-config: the file's settings under the command line's, and a
// bad file refused as bad input naming each mistake's line.
func TestConfigFiles(t *testing.T) {
	dir := filepath.Join("testdata", "config")
	tests := []struct {
		name    string
		args    []string
		want    []string // lines of the printed settings
		wantErr []string
	}{
		{"agent file", []string{"agent", "--config", filepath.Join(dir, "agent.yaml"), "--print-config"},
			[]string{"name: gpu-1", "gpus: 4", "gpu-type: a100", "grace: 10s", "allow-command: [python3 train.py **, 'emulated:*']", "pass-env: [CUDA_HOME]", "insecure: false"}, nil},
		{"flags win", []string{"agent", "--gpus", "2", "--config", filepath.Join(dir, "agent.yaml"), "--allow-command", "python3 x.py", "--print-config"},
			[]string{"gpus: 2", "allow-command: [python3 x.py]", "name: gpu-1"}, nil},
		{"server defaults", []string{"server", "--print-config", "--id", "s1"},
			[]string{"id: s1", "http: 127.0.0.1:8080", "interval: 1m0s", "bootstrap: false"}, nil},
		{"bad server file", []string{"server", "--config", filepath.Join(dir, "server-bad.yaml")}, nil, []string{
			`server-bad.yaml:3: unknown key "intervall" (did you mean "interval"?)`,
			`server-bad.yaml:4: max-failures: bad value`}},
		{"missing file", []string{"agent", "--config", filepath.Join(dir, "none.yaml")}, nil, []string{"none.yaml: no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRootCmd()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetArgs(tt.args)
			err := root.Execute()
			if tt.wantErr != nil {
				if !errors.Is(err, usage.ErrBadSetting) || exitCode(err) != 2 {
					t.Fatalf("error %v (exit %d), want bad input (exit 2)", err, exitCode(err))
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(out.String(), "\n")
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("printed settings lack %q:\n%s", w, out.String())
				}
			}
		})
	}
}
