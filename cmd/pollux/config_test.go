package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"pollux/internal/flagfile"
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
		{"agent of CPU slots", []string{"agent", "--config", filepath.Join(dir, "agent-cpus.yaml"), "--print-config"},
			[]string{"name: cpu-1", "cpu-slots: 2", "cpus: 0-1"}, nil},
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

// given lists the flags of fs given (on the command line or in a file),
// but --config and --print-config.
func given(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed && f.Name != flagfile.FlagConfig && f.Name != flagfile.FlagPrintConfig {
			out = append(out, f.Name)
		}
	})
	return out
}

// printConfig runs cmd with args and --print-config and returns what it
// printed.
func printConfig(t *testing.T, cmd *cobra.Command, args []string) string {
	t.Helper()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(append(args, "--print-config"))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v --print-config: %v", args, err)
	}
	return out.String()
}

// TestPrintedConfigStarts: the file `pollux server --print-config` or
// `pollux agent --print-config` prints, given back with --config, is read
// as the command line was: the same flags given, the same settings
// printed again, and a server or agent configuration made without error
// (a server refused "--min-nodes needs --autoscale"; an agent's
// "allow-command: []" replaced the default allow-list with none).
func TestPrintedConfigStarts(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, role string
		args       []string
		allow      []string // the agent's allow-list (nil: the default)
	}{
		{"server defaults", "server", []string{"--id", "s1"}, nil},
		{"bootstrap server", "server", []string{"--id", "s1", "--data-dir", filepath.Join(dir, "s1"), "--bootstrap",
			"--peers", "s1=127.0.0.1:7000=127.0.0.1:8080", "--checkpoint-root", "/ckpt", "--interval", "30s", "--topology-levels", "rack,zone"}, nil},
		{"autoscaling server", "server", []string{"--id", "s1", "--autoscale", "exec", "--scale-up-command", "up",
			"--scale-down-command", "down", "--max-nodes", "6", "--min-nodes", "2"}, nil},
		{"agent defaults", "agent", []string{"--name", "gpu-1", "--gpus", "4"}, nil},
		{"agent of CPU slots", "agent", []string{"--name", "cpu-1", "--cpu-slots", "2", "--cpus", "0-1"}, nil},
		{"agent with an allow-list", "agent", []string{"--name", "gpu-1", "--join", "127.0.0.1:7946,127.0.0.1:7947",
			"--allow-command", "python3 train.py **", "--allow-command", "emulated:*"}, []string{"python3 train.py **", "emulated:*"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var so, so2 serverFlags
			var ao, ao2 agentFlags
			mk := map[string]func(int) *cobra.Command{
				"server": func(n int) *cobra.Command { return serverCmd([]*serverFlags{&so, &so2}[n]) },
				"agent":  func(n int) *cobra.Command { return agentCmd([]*agentFlags{&ao, &ao2}[n]) },
			}[tt.role]
			first := mk(0)
			printed := printConfig(t, first, tt.args)
			file := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
			if err := os.WriteFile(file, []byte(printed), 0o644); err != nil {
				t.Fatal(err)
			}
			second := mk(1)
			if again := printConfig(t, second, []string{"--config", file}); again != printed {
				t.Errorf("printed again:\n%s\nfirst:\n%s", again, printed)
			}
			if got, want := given(second.Flags()), given(first.Flags()); !slices.Equal(got, want) {
				t.Errorf("the file gives %q, the command line gave %q", got, want)
			}
			switch tt.role {
			case "server":
				if _, err := serverConfig(second, so2); err != nil {
					t.Fatalf("a server given its printed settings: %v", err)
				}
			case "agent":
				c, err := agentConfig(second, ao2)
				if err != nil {
					t.Fatalf("an agent given its printed settings: %v", err)
				}
				if !slices.Equal(c.AllowCommands, tt.allow) || (c.AllowCommands == nil) != (tt.allow == nil) {
					t.Errorf("allow-list %q, want %q (nil: the default)", c.AllowCommands, tt.allow)
				}
			}
		})
	}
}
