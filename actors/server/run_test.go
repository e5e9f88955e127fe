package server_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"pollux/actors/allocator"
	"pollux/actors/fedlink"
	"pollux/actors/server"
	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/internal/poll"
	"pollux/internal/secure"
	"pollux/optimizer"
)

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A server run in process with TLS bootstraps a one-server cluster with
// levels rack,zone: it tells its addresses, configures the cluster,
// advertises the levels in its gossip, serves the API over TLS (a
// request without a token is a 401), and stops cleanly when its context
// ends.
func TestRunServesUntilCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	dir := t.TempDir()
	b, err := pki.DevBundle(filepath.Join(dir, "tls"), []string{"s0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := b.Files("s0")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, httpAddr := freeAddr(t), freeAddr(t)
	var log logbuf.Buffer
	ready := make(chan server.Ready, 1)
	cfg := server.Config{ID: "s0", DataDir: filepath.Join(dir, "s0"), Bind: "127.0.0.1", RaftAddr: raftAddr, HTTPAddr: httpAddr,
		Peers: []server.Peer{{ID: "s0", RaftAddr: raftAddr, HTTPAddr: httpAddr}}, Bootstrap: true, FastGossip: true,
		Interval: 500 * time.Millisecond, NodeGrace: 3 * time.Second, AgentLease: allocator.DefaultLease, MaxFailures: 5, TimeScale: 1,
		CheckpointRoot: filepath.Join(dir, "ckpt"), Topology: "rack=r1,zone=z1", Levels: []string{"rack", "zone"},
		Policy: optimizer.NewPollux(), TypedPolicy: optimizer.NewHetPollux(), PolicyName: "auto",
		Security:   secure.Options{CA: b.CA, Cert: cert, Key: key, GossipKey: b.GossipKey},
		Federation: server.Federation{Interval: fedlink.DefaultInterval},
		Logger:     slog.New(slog.NewTextHandler(&log, nil)), OnReady: func(r server.Ready) { ready <- r }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg) }()
	var r server.Ready
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("Run returned %v before ready:\n%s", err, log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("not ready within 60 s:\n%s", log.String())
	}
	if r.ID != "s0" || r.HTTP != httpAddr || r.Raft != raftAddr || r.Gossip == "" || r.Actor == "" || r.Federation != "" {
		t.Errorf("ready %+v", r)
	}
	poll.Until(t, 30*time.Second, "cluster configuration", func() bool { return len(log.Lines("server: cluster configuration")) == 1 })

	keys, err := b.GossipKeys()
	if err != nil {
		t.Fatal(err)
	}
	m, err := cluster.Start(cluster.Config{Name: "watcher", Fast: true, Keys: keys, Logger: slog.New(slog.DiscardHandler),
		Meta: cluster.Meta{Role: cluster.RoleAgent}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	if _, err := m.Join([]string{r.Gossip}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "levels advertised in the gossip", func() bool {
		for _, mb := range m.Members() {
			if mb.Name == "s0" && mb.Meta.Levels == "rack,zone" && mb.Meta.Topology == "rack=r1,zone=z1" && mb.Meta.HTTPAddr == httpAddr {
				return true
			}
		}
		return false
	})

	hc, err := b.HTTPClient(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get("https://" + httpAddr + api.PathJobs)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %s", api.PathJobs, resp.Status)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60 s of its context's end")
	}
	if len(log.Lines("server: stopping")) != 1 {
		t.Errorf("no stop logged:\n%s", log.String())
	}
}
