package server

import (
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"pollux/actors/allocator"
	"pollux/internal/usage"
)

func TestParsePeers(t *testing.T) {
	tests := []struct {
		in   string
		want []Peer
		err  string
	}{
		{"", nil, ""},
		{"s0=127.0.0.1:7000=127.0.0.1:8080", []Peer{{"s0", "127.0.0.1:7000", "127.0.0.1:8080"}}, ""},
		{"s0=r0=h0,s1=r1=h1", []Peer{{"s0", "r0", "h0"}, {"s1", "r1", "h1"}}, ""},
		{"s0=r0", nil, `--peers entry "s0=r0" is not id=raftaddr=httpaddr`},
		{"s0=r0=h0,=r1=h1", nil, `--peers entry "=r1=h1"`},
		{"s0=r0=h0,s0=r1=h1", nil, `--peers names "s0" twice`},
	}
	for _, tt := range tests {
		got, err := ParsePeers(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, usage.ErrBadSetting) {
				t.Errorf("ParsePeers(%q): %v, want a bad setting saying %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePeers(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestCheckLease(t *testing.T) {
	tests := []struct {
		lease, grace time.Duration
		err          string
	}{
		{allocator.DefaultLease, 3 * time.Second, ""},
		{2 * time.Second, 3 * time.Second, ""},
		{3 * time.Second, 3 * time.Second, "at most 2s"},
		{4 * time.Second, 5 * time.Second, "leaves no margin under --node-grace 5s"},
		{0, time.Hour, "outside [4ms, 10m]"},
		{11 * time.Minute, time.Hour, "outside [4ms, 10m]"},
	}
	for _, tt := range tests {
		err := checkLease(tt.lease, tt.grace)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("checkLease(%v, %v) = %v, want %q", tt.lease, tt.grace, err, tt.err)
		}
	}
}

// validConfig is a configuration check accepts.
func validConfig(t *testing.T) Config {
	return Config{ID: "s0", DataDir: t.TempDir(), Interval: time.Second, NodeGrace: 3 * time.Second, AgentLease: allocator.DefaultLease,
		TimeScale: 1, PolicyName: "auto", Peers: []Peer{{"s0", "127.0.0.1:7000", "127.0.0.1:8080"}}, Bootstrap: true,
		Federation: Federation{Interval: time.Second}}
}

// validAutoscale are autoscaling settings check accepts.
func validAutoscale() Autoscale {
	return Autoscale{Provider: "exec", MinNodes: 1, MaxNodes: 4, NodeGPUs: 4, LowUtil: 0.5, HighUtil: 0.8, JoinTimeout: time.Minute,
		UpCommand: "up", DownCommand: "down", CommandTimeout: time.Minute, Attempts: 1}
}

// Every bad setting is refused before anything starts, marked as a bad
// setting, naming its flag.
func TestConfigCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"valid", func(*Config) {}, ""},
		{"valid with autoscaling", func(c *Config) { c.Autoscale = validAutoscale() }, ""},
		{"no id", func(c *Config) { c.ID = "" }, "--id and --data-dir are required"},
		{"bootstrap without peers", func(c *Config) { c.Peers = nil }, "--bootstrap needs --peers"},
		{"negative retain", func(c *Config) { c.Retain = -time.Second }, "--retain -1s not negative"},
		{"zero interval", func(c *Config) { c.Interval = 0 }, "--interval 0s must be positive"},
		{"lease over the grace", func(c *Config) { c.AgentLease = 3 * time.Second }, "--agent-lease 3s leaves no margin"},
		{"relative checkpoint root", func(c *Config) { c.CheckpointRoot = "ckpt" }, `--checkpoint-root "ckpt" is not an absolute path`},
		{"raft election timeout", func(c *Config) { c.RaftElection = time.Second }, ""},
		{"raft election timeout too short", func(c *Config) { c.RaftElection = 10 * time.Millisecond }, "--raft-election-timeout 10ms outside"},
		{"bad topology", func(c *Config) { c.Topology = "zone=z1,rack=r1" }, "server: --topology: cluster: bad node metadata"},
		{"topology missing a level", func(c *Config) { c.Topology, c.Levels = "rack=r1", []string{"rack", "zone"} },
			"--topology does not fit --topology-levels"},
		{"bad autoscaling", func(c *Config) { c.Autoscale = validAutoscale(); c.Autoscale.MinNodes = 5 }, "--min-nodes 5 is above --max-nodes 4"},
		{"autoscaling with sia", func(c *Config) { c.Autoscale, c.PolicyName = validAutoscale(), "sia" }, "not --policy sia"},
		{"default trust domain", func(c *Config) { c.Federation.Cluster = "pollux" }, "trust domain"},
		{"federation address alone", func(c *Config) { c.Federation.Addr = "127.0.0.1:0" }, "need --federation"},
		{"federation insecure", func(c *Config) {
			c.Federation = Federation{Cluster: "lab-a", File: "f.json", Addr: "127.0.0.1:0", Interval: time.Second}
			c.Security.Insecure = true
		}, "cannot be combined with --insecure"},
		{"peers without this server", func(c *Config) { c.ID = "s1" }, `--peers does not list this server "s1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig(t)
			tt.change(&c)
			_, err := c.check()
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, usage.ErrBadSetting) {
				t.Fatalf("%v, want a bad setting saying %q", err, tt.err)
			}
		})
	}
}

// The autoscaling settings make the allocator's: the node template,
// the bounds, and for the local provider its directory beside the
// server's data directory.
func TestAutoscaleBuild(t *testing.T) {
	dir := t.TempDir()
	env := scaleEnv{dataDir: filepath.Join(dir, "s0"), gossip: "127.0.0.1:1", insecure: true, timeScale: 1, logger: slog.New(slog.DiscardHandler)}
	for _, provider := range []string{"exec", "local"} {
		o := validAutoscale()
		o.Provider, o.NodeGPUs, o.NodeGPUType, o.MaxNodes = provider, 8, "a100", 6
		if err := o.check(); err != nil {
			t.Fatal(err)
		}
		as, err := o.build(env)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl := as.Settings.Template; tmpl.GPUs != 8 || tmpl.Type != "a100" || as.Settings.MaxNodes != 6 || as.Provider == nil {
			t.Errorf("%s: settings %+v", provider, as.Settings)
		}
	}
	if as, err := (&Autoscale{}).build(env); as != nil || err != nil {
		t.Errorf("autoscaling off: %v, %v", as, err)
	}
}

func TestHostOf(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:80": "127.0.0.1", "[::1]:7000": "::1", ":8080": "", "nonsense": ""} {
		if got := hostOf(in); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", in, got, want)
		}
	}
}
