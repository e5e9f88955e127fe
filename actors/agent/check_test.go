package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"pollux/cluster"
	"pollux/internal/cpuset"
	"pollux/internal/usage"
)

// validConfig is a configuration check accepts: two emulated GPUs.
func validConfig() Config {
	return Config{Name: "a0", GPUs: 2, TimeScale: 1, WorkerExec: []string{"/bin/true"}}
}

// Every bad setting is refused before anything starts, marked as a bad
// setting, naming its flag.
func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"no name", func(c *Config) { c.Name = "" }, "agent: --name is empty"},
		{"zero time scale", func(c *Config) { c.TimeScale = 0 }, "--time-scale 0, want > 0"},
		{"zone before rack", func(c *Config) { c.Topology = "zone=z1,rack=r1" }, `agent: --topology: cluster: bad node metadata: topology "zone=z1,rack=r1"`},
		{"rack and topology disagree", func(c *Config) { c.Rack, c.Topology = "r1", "rack=r2" }, "disagree"},
		{"bad GPU type", func(c *Config) { c.GPUType = "A100" }, `--gpu-type: optimizer: bad topology: GPU type name "A100"`},
		{"too many GPUs", func(c *Config) { c.GPUs = cluster.MaxGPUs + 1 }, fmt.Sprintf("--gpus %d outside", cluster.MaxGPUs+1)},
		{"GPUs and CPU slots", func(c *Config) { c.CPUSlots = 2 }, "--gpus and --cpu-slots exclude each other"},
		{"negative CPU slots", func(c *Config) { c.GPUs, c.CPUSlots = 0, -1 }, "--cpu-slots -1 outside"},
		{"cores without CPU slots", func(c *Config) { c.CPUs = "0" }, "agent: --cpus needs --cpu-slots"},
		{"bad core list", func(c *Config) { c.GPUs, c.CPUSlots, c.CPUs = 0, 1, "1-0" }, `agent: --cpus: cpuset: bad cpu list: "1-0": range "1-0" runs backwards`},
		{"cores outside the affinity", func(c *Config) { c.GPUs, c.CPUSlots, c.CPUs = 0, 1, "0,1023" }, "agent: --cpus: cpuset: cores not allowed: 1023 (this process may use "},
		{"bad allowed command", func(c *Config) { c.AllowCommands = []string{""} }, "agent: --allow-command"},
		{"bad variable name", func(c *Config) { c.PassEnv = []string{"A=B"} }, `--pass-env "A=B" is not a variable name`},
		{"unknown user", func(c *Config) { c.RunAs = "no-such-user-of-pollux" }, `--run-as "no-such-user-of-pollux"`},
	}
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		tests = append(tests, struct {
			name   string
			change func(*Config)
			err    string
		}{"no GPUs to count", func(c *Config) { c.GPUs = 0 }, "pass --gpus N to emulate N GPUs"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(&c)
			a := &agent{cfg: c, log: slog.New(slog.DiscardHandler)}
			err := a.check(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, usage.ErrBadSetting) {
				t.Fatalf("%v, want a bad setting saying %q", err, tt.err)
			}
		})
	}
}

// A valid configuration gives the agent its place, GPUs and workers'
// settings.
func TestCheckDerives(t *testing.T) {
	t.Setenv("POLLUX_AGENT_TEST_VAR", "yes")
	c := validConfig()
	c.Rack, c.GPUType, c.PassEnv = "r3", "t4", []string{"POLLUX_AGENT_TEST_VAR", "POLLUX_AGENT_TEST_UNSET"}
	a := &agent{cfg: c, log: slog.New(slog.DiscardHandler)}
	if err := a.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.meta.Topology != "rack=r3" || a.meta.Rack != "r3" || a.meta.GPUType != "t4" || a.gpus != 2 || a.slots != nil ||
		!reflect.DeepEqual(a.workerEnv, []string{"POLLUX_AGENT_TEST_VAR=yes"}) || a.runAs != nil {
		t.Errorf("derived %+v", a)
	}
	c = validConfig()
	c.GPUs, c.CPUSlots = 0, 2
	a = &agent{cfg: c, log: slog.New(slog.DiscardHandler)}
	if err := a.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.gpus != 2 || len(a.slots) != 2 {
		t.Errorf("CPU slots: %d GPUs, slots %v", a.gpus, a.slots)
	}
	// --cpus: the slots split the cores named, here the affinity's first.
	allowed, err := cpuset.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	c.CPUs = fmt.Sprint(allowed[0])
	a = &agent{cfg: c, log: slog.New(slog.DiscardHandler)}
	if err := a.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := [][]int{{allowed[0]}, {allowed[0]}}; a.gpus != 2 || !reflect.DeepEqual(a.slots, want) {
		t.Errorf("CPU slots on --cpus %s: %d GPUs, slots %v, want %v", c.CPUs, a.gpus, a.slots, want)
	}
}

// fakeMembers is a gossip membership a test changes.
type fakeMembers struct{ members chan []cluster.Member }

func (f fakeMembers) Members() []cluster.Member {
	select {
	case m := <-f.members:
		return m
	default:
		return nil
	}
}

// checkJoinTopology waits for a server that advertises the levels, then
// stops the agent if its topology does not fit them.
func TestCheckJoinTopology(t *testing.T) {
	tests := []struct {
		name, topology, levels string
		err                    string
	}{
		{"fits", "rack=r1,zone=z1", "rack,zone", ""},
		{"the default rack", "", "rack", ""},
		{"a zone the cluster has not", "rack=r0,zone=z1", "rack",
			`refused at join: the cluster's topology levels are rack (server s0): cluster: bad node metadata: topology "rack=r0,zone=z1": optimizer: bad topology: level "zone" in "rack=r0,zone=z1" is not one of the cluster's levels (rack)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, fail := context.WithCancelCause(context.Background())
			defer fail(nil)
			m := fakeMembers{members: make(chan []cluster.Member, 1)}
			done := make(chan struct{})
			go func() { defer close(done); checkJoinTopology(ctx, m, tt.topology, fail) }()
			// First an agent and a server that advertises no levels yet.
			m.members <- []cluster.Member{{Name: "a1", Meta: cluster.Meta{Role: cluster.RoleAgent, Levels: "rack"}}, {Name: "s1", Meta: cluster.Meta{Role: cluster.RoleServer}}}
			m.members <- []cluster.Member{{Name: "s0", Meta: cluster.Meta{Role: cluster.RoleServer, Levels: tt.levels}}}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("checkJoinTopology did not return once a server advertised the levels")
			}
			err := context.Cause(ctx)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || err.Error() != tt.err) {
				t.Errorf("stopped by %v, want %q", err, tt.err)
			}
		})
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(nil)
	checkJoinTopology(ctx, fakeMembers{}, "rack=r1", cancel) // returns: no server ever advertises
}
