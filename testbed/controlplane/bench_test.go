package controlplane

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"

	"pollux/cluster/pki"
)

func TestValidate(t *testing.T) {
	good := Options{Nodes: 4, Jobs: 8, GPUs: 2, Rounds: 3, Failovers: 1, Interval: time.Second, ReportEvery: 50 * time.Millisecond,
		Heartbeat: time.Second, Election: time.Second, Lease: 500 * time.Millisecond, AgentLease: 2 * time.Second, LogLevel: "error",
		RemoteOptions: func(*pki.Credentials, *slog.Logger) ([]remote.ConfigOption, error) { return nil, nil }}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(o *Options){
		"no nodes":           func(o *Options) { o.Nodes = 0 },
		"too many jobs":      func(o *Options) { o.Jobs = 9000 },
		"negative failovers": func(o *Options) { o.Failovers = -1 },
		"no interval":        func(o *Options) { o.Interval = 0 },
		"no lease":           func(o *Options) { o.Lease = 0 },
		"no agents' lease":   func(o *Options) { o.AgentLease = 0 },
		"bad log level":      func(o *Options) { o.LogLevel = "loud" },
		"gRPC unconfigured":  func(o *Options) { o.RemoteOptions = nil },
	} {
		o := good
		edit(&o)
		if err := o.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	// Without gRPC there is nothing to configure.
	ok := good
	ok.RemoteOptions, ok.Local = nil, true
	if err := ok.Validate(); err != nil {
		t.Errorf("local: %v", err)
	}
}
