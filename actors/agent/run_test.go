package agent_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"pollux/actors/agent"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
	"pollux/internal/secure"
)

// An agent run in process with TLS tells its addresses, joins the
// gossip as the member its Config declares (GPUs, place, actor address)
// once a server's member joins it, and when its context ends stops and
// leaves.
func TestRunJoinsAndLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent")
	}
	dir := t.TempDir()
	b, err := pki.DevBundle(filepath.Join(dir, "tls"), nil, []string{"a0"})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := b.Files("a0")
	if err != nil {
		t.Fatal(err)
	}
	var log logbuf.Buffer
	ready := make(chan agent.Ready, 1)
	cfg := agent.Config{Name: "a0", Bind: "127.0.0.1", GPUs: 2, Topology: "rack=r1", GPUType: "t4", Grace: time.Second, FastGossip: true,
		TimeScale: 1, DataDir: filepath.Join(dir, "a0"), WorkerExec: []string{"/bin/true"},
		Security: secure.Options{CA: b.CA, Cert: cert, Key: key, GossipKey: b.GossipKey},
		Logger:   slog.New(slog.NewTextHandler(&log, nil)), OnReady: func(r agent.Ready) { ready <- r }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	var r agent.Ready
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("Run returned %v before ready:\n%s", err, log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("not ready within 60 s:\n%s", log.String())
	}
	if r.Name != "a0" || r.GPUs != 2 || r.Topology != "rack=r1" || r.GPUType != "t4" || r.CPUSlots || r.Gossip == "" || r.Actor == "" || r.Reports == "" {
		t.Errorf("ready %+v", r)
	}

	keys, err := b.GossipKeys()
	if err != nil {
		t.Fatal(err)
	}
	m, err := cluster.Start(cluster.Config{Name: "s0", Fast: true, Keys: keys, Logger: slog.New(slog.DiscardHandler),
		Meta: cluster.Meta{Role: cluster.RoleServer, Levels: "rack"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	if _, err := m.Join([]string{r.Gossip}); err != nil {
		t.Fatal(err)
	}
	seen := func(ok func(cluster.Member) bool) bool {
		for _, mb := range m.Members() {
			if mb.Name == "a0" && ok(mb) {
				return true
			}
		}
		return false
	}
	poll.Until(t, 30*time.Second, "the agent's member", func() bool {
		return seen(func(mb cluster.Member) bool {
			return mb.Meta.Role == cluster.RoleAgent && mb.Meta.GPUs == 2 && mb.Meta.Rack == "r1" && mb.Meta.GPUType == "t4" && mb.Meta.ActorAddr == r.Actor
		})
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60 s of its context's end")
	}
	if len(log.Lines("agent: stopping")) != 1 {
		t.Errorf("no stop logged:\n%s", log.String())
	}
	poll.Until(t, 30*time.Second, "the agent leaving", func() bool { return !seen(func(cluster.Member) bool { return true }) })
}
