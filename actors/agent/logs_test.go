//go:build !race

// Two remote nodes in one process race on grpc's global logger (see
// deps-notes): this test runs without the race detector.

package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"pollux/actors/agent"
	"pollux/actors/node/workerlog"
	"pollux/actors/pb"
	"pollux/cluster/pki"
	"pollux/internal/logbuf"
	"pollux/internal/secure"
)

// A server reaches an agent's logs actor over the mutual-TLS actor
// channel: it answers for the logs under DATA_DIR/logs (0700), and
// says when it has none.
func TestLogsActorAnswersServers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an agent")
	}
	dir := t.TempDir()
	b, err := pki.DevBundle(filepath.Join(dir, "tls"), []string{"s0"}, []string{"a0"})
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := b.Files("a0")
	if err != nil {
		t.Fatal(err)
	}
	var log logbuf.Buffer
	ready := make(chan agent.Ready, 1)
	data := filepath.Join(dir, "a0")
	cfg := agent.Config{Name: "a0", Bind: "127.0.0.1", GPUs: 1, Grace: time.Second, FastGossip: true, TimeScale: 1, DataDir: data,
		WorkerExec: []string{"/bin/true"}, Security: secure.Options{CA: b.CA, Cert: cert, Key: key, GossipKey: b.GossipKey},
		Logger: slog.New(slog.NewTextHandler(&log, nil)), OnReady: func(r agent.Ready) { ready <- r }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, cfg) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("the agent did not stop within 60 s")
		}
	}()
	var r agent.Ready
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("Run returned %v before ready:\n%s", err, log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("not ready within 60 s:\n%s", log.String())
	}
	logs := filepath.Join(data, "logs")
	if st, err := os.Stat(logs); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("log directory %s: %v %v", logs, st, err)
	}
	// A worker's log, as the agent's node writes it.
	store, err := workerlog.Open(workerlog.Config{Dir: logs})
	if err != nil {
		t.Fatal(err)
	}
	w, err := store.Create(workerlog.Key{Job: "j", Incarnation: 1, Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(w, "hello from rank 0")
	w.Close()

	// The server's side: an actor system with a server certificate.
	creds, err := b.Credentials("s0")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := secure.RemoteOptions(creds, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0, opts...))
	rem.Start()
	defer rem.Shutdown(false)
	ask := func(m *pb.LogRead) *pb.LogChunk {
		t.Helper()
		res, err := sys.Root.RequestFuture(actor.NewPID(r.Actor, pb.LogsActor), m, 20*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		c, ok := res.(*pb.LogChunk)
		if !ok {
			t.Fatalf("answer %T %v", res, res)
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		m     *pb.LogRead
		found bool
		lines int
	}{
		{"a log", &pb.LogRead{Job: "j", Incarnation: 1}, true, 1},
		{"the newest", &pb.LogRead{Job: "j"}, true, 1},
		{"another rank", &pb.LogRead{Job: "j", Incarnation: 1, Rank: 1}, false, 0},
		{"another job", &pb.LogRead{Job: "k"}, false, 0},
	} {
		c := ask(tc.m)
		if c.Found != tc.found || len(c.Lines) != tc.lines || c.Node != "a0" || c.Error != "" {
			t.Errorf("%s: %v", tc.name, c)
		}
		if tc.found && (!c.Closed || c.Lines[0].Text != "hello from rank 0") {
			t.Errorf("%s: %v", tc.name, c)
		}
	}
}
