package launch

import (
	"os"
	"slices"
	"testing"

	"github.com/spf13/pflag"

	"pollux/internal/flagfile"
	"pollux/testbed/chaos/history"
)

// TestConfigArgsRoundTrip writes a member's command line as its settings
// file and reads the file back as `pollux agent --config` does: every
// flag gets the value the command line gave it.
func TestConfigArgsRoundTrip(t *testing.T) {
	c := &Cluster{o: Options{Dir: t.TempDir()}}
	m := &Member{Role: history.Agent, ID: "a0", args: []string{"agent", "--name", "a0", "--gpus", "4",
		"--join", "127.0.0.1:1,127.0.0.1:2", "--fast-gossip", "--worker-exec", "/bin/pollux,-test.run=x,--",
		"--autoscale-agent-arg=--grace=5s", "--pass-env", "A", "--pass-env", "B", "--allow-command", "emulated:*", "--time-scale", "100"}}
	args, err := c.configArgs(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"agent", "--config", c.ConfigFile(m)}; !slices.Equal(args, want) {
		t.Fatalf("command line %q, want %q", args, want)
	}
	if fi, err := os.Stat(c.ConfigFile(m)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("settings file: %v, %v", fi, err)
	}
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	name := fs.String("name", "", "")
	gpus := fs.Int("gpus", 0, "")
	join := fs.StringSlice("join", nil, "")
	fast := fs.Bool("fast-gossip", false, "")
	exec := fs.StringSlice("worker-exec", nil, "")
	scale := fs.StringArray("autoscale-agent-arg", nil, "")
	pass := fs.StringArray("pass-env", nil, "")
	allow := fs.StringArray("allow-command", nil, "")
	ts := fs.Float64("time-scale", 0, "")
	if err := flagfile.ApplyFile(fs, c.ConfigFile(m)); err != nil {
		t.Fatal(err)
	}
	switch {
	case *name != "a0" || *gpus != 4 || !*fast || *ts != 100:
		t.Errorf("name %q, gpus %d, fast-gossip %v, time-scale %v", *name, *gpus, *fast, *ts)
	case !slices.Equal(*join, []string{"127.0.0.1:1", "127.0.0.1:2"}) || !slices.Equal(*exec, []string{"/bin/pollux", "-test.run=x", "--"}):
		t.Errorf("join %q, worker-exec %q", *join, *exec)
	case !slices.Equal(*scale, []string{"--grace=5s"}) || !slices.Equal(*pass, []string{"A", "B"}) || !slices.Equal(*allow, []string{"emulated:*"}):
		t.Errorf("autoscale-agent-arg %q, pass-env %q, allow-command %q", *scale, *pass, *allow)
	}
	bad := &Member{Role: history.Server, ID: "s0", args: []string{"server", "stray"}}
	if _, err := c.configArgs(bad); err == nil {
		t.Error("a command line with a stray argument written as settings")
	}
}
