package member

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"pollux/cluster"
	"pollux/internal/logbuf"
)

func TestPlace(t *testing.T) {
	tests := []struct {
		topology, rack, gpuType string
		want                    cluster.Meta
		err                     string
	}{
		{"", "", "", cluster.Meta{}, ""},
		{"rack=r1,zone=z1", "", "a100", cluster.Meta{Rack: "r1", Topology: "rack=r1,zone=z1", GPUType: "a100"}, ""},
		{"", "r3", "", cluster.Meta{Rack: "r3", Topology: "rack=r3"}, ""},
		{"rack=r3,zone=z1", "r3", "", cluster.Meta{Rack: "r3", Topology: "rack=r3,zone=z1"}, ""},
		{"rack=r2", "r1", "", cluster.Meta{}, `--rack "r1" and --topology "rack=r2" disagree`},
		{"zone=z1,rack=r1", "", "", cluster.Meta{}, `--topology: cluster: bad node metadata: topology "zone=z1,rack=r1"`},
		{"rack", "", "", cluster.Meta{}, `"rack" is not level=domain`},
		{"", "", "A100", cluster.Meta{}, `--gpu-type: optimizer: bad topology: GPU type name "A100"`},
	}
	for _, tt := range tests {
		got, err := Place(tt.topology, tt.rack, tt.gpuType)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Place(%q, %q, %q): %v, want %q", tt.topology, tt.rack, tt.gpuType, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Place(%q, %q, %q) = %+v, %v; want %+v", tt.topology, tt.rack, tt.gpuType, got, err, tt.want)
		}
	}
}

// JoinUntil retries until a seed answers, and gives up when its context
// ends.
func TestJoinUntil(t *testing.T) {
	var log logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	start := func(name string) *cluster.Membership {
		m, err := cluster.Start(cluster.Config{Name: name, Fast: true, Logger: slog.New(slog.DiscardHandler), Meta: cluster.Meta{Role: cluster.RoleServer}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	a, b := start("a"), start("b")
	if err := JoinUntil(context.Background(), a, []string{b.Addr()}, logger); err != nil {
		t.Fatal(err)
	}
	if len(log.Lines("joined the cluster", "via=1")) != 1 {
		t.Errorf("log %s", log.String())
	}
	// Nobody listens on a port a closed member held.
	c := start("c")
	dead := c.Addr()
	_ = c.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 3*joinRetry)
	defer cancel()
	if err := JoinUntil(ctx, a, []string{dead}, logger); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("joining nobody: %v", err)
	}
	if len(log.Lines("join failed, retrying")) < 2 {
		t.Errorf("no retries logged: %s", log.String())
	}
}
