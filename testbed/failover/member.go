package failover

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"pollux/consensus"
	"pollux/optimizer/goodput"
)

// MemberOptions configure one server process.
type MemberOptions struct {
	// ID is the server id, Dir its data directory, Raft and HTTP its
	// addresses; Peers lists every server as id=raftaddr=httpaddr,
	// comma-separated; Bootstrap forms the cluster from them.
	ID, Dir, Raft, HTTP, Peers string
	Bootstrap                  bool
	Heartbeat, Election, Lease time.Duration
}

// RunMember runs one server until stdin closes (the benchmark stopped or
// died). Its log goes to logw.
func RunMember(o MemberOptions, stdin io.Reader, logw io.Writer) error {
	servers, httpPeers, err := ParsePeers(o.Peers)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := consensus.DefaultConfig(raft.ServerID(o.ID))
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = o.Heartbeat, o.Election, o.Lease
	cfg.Logger = logger
	trans, err := consensus.ListenTCP(o.Raft, cfg)
	if err != nil {
		return err
	}
	srv, err := consensus.OpenDisk(cfg, o.Dir, trans, consensus.NewHTTPForwarder(nil, httpPeers))
	if err != nil {
		_ = trans.Close()
		return err
	}
	defer srv.Shutdown()
	if o.Bootstrap {
		if err := srv.Bootstrap(servers); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", o.HTTP)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	hs := &http.Server{Handler: memberHandler(srv), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
	return nil
}

// ParsePeers parses id=raftaddr=httpaddr,...
func ParsePeers(s string) ([]raft.Server, map[raft.ServerID]string, error) {
	var servers []raft.Server
	httpPeers := map[raft.ServerID]string{}
	for _, p := range strings.Split(s, ",") {
		parts := strings.Split(p, "=")
		if len(parts) != 3 || parts[0] == "" {
			return nil, nil, fmt.Errorf("%w: --peers: %q is not id=raftaddr=httpaddr", ErrConfig, p)
		}
		id := raft.ServerID(parts[0])
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(parts[1])})
		httpPeers[id] = parts[2]
	}
	return servers, httpPeers, nil
}

// memberHandler serves forwarded writes and the benchmark's endpoints.
func memberHandler(srv *consensus.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(consensus.ForwardPath, srv.ForwardHandler())
	mux.HandleFunc("GET /bench/status", func(w http.ResponseWriter, _ *http.Request) {
		r := srv.Raft()
		id, _ := srv.Leader()
		writeJSON(w, memberStatus{ID: string(srv.ID()), State: r.State().String(), Leader: string(id),
			Term: r.CurrentTerm(), Applied: r.AppliedIndex(), Last: r.LastIndex()})
	})
	// A write through this server (forwarded if it is a follower).
	mux.HandleFunc("POST /bench/write", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 20*time.Second)
		defer cancel()
		if err := srv.RegisterNode(ctx, consensus.Node{ID: req.URL.Query().Get("node"), GPUs: 1}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, map[string]bool{"ok": true})
	})
	// The throughput run, on the leader.
	mux.HandleFunc("POST /bench/allocs", func(w http.ResponseWriter, req *http.Request) {
		n, err1 := strconv.Atoi(req.URL.Query().Get("n"))
		batch, err2 := strconv.Atoi(req.URL.Query().Get("batch"))
		if err := errors.Join(err1, err2); err != nil || n < 1 || batch < 1 {
			http.Error(w, fmt.Sprintf("bad n or batch: %v", err), http.StatusBadRequest)
			return
		}
		secs, err := commitAllocations(req.Context(), srv, n, batch)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, allocsResult{N: n, Seconds: secs})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Shape of the throughput run's cluster: benchNodes nodes of 8 GPUs and
// benchJobs jobs; every allocation moves each job to the next node and
// varies its GPU count, so every commit changes every placement.
const (
	benchNodes = 8
	benchJobs  = 16
)

// commitAllocations commits n allocations on the leader srv, pipelined in
// batches, and returns the seconds they took.
func commitAllocations(ctx context.Context, srv *consensus.Server, n, batch int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var setup []consensus.Command
	for i := range benchNodes {
		setup = append(setup, &consensus.RegisterNode{Node: consensus.Node{ID: fmt.Sprintf("bench-node-%d", i), GPUs: 8, Health: consensus.Alive}})
	}
	st := srv.LocalState()
	for j := range benchJobs {
		id := fmt.Sprintf("bench-job-%d", j)
		if _, ok := st.Jobs[id]; ok {
			continue
		}
		setup = append(setup, &consensus.SubmitJob{ID: id, Spec: consensus.JobSpec{App: "bench", MinReplicas: 1, MaxReplicas: 4,
			Limits: goodput.Limits{InitBatch: 64, MaxBatch: 1024, MinLocal: 32, MaxLocal: 256}}})
	}
	if err := applyAll(ctx, srv, setup); err != nil {
		return 0, err
	}
	st, err := srv.Read(ctx)
	if err != nil {
		return 0, err
	}
	term, ok := srv.Leadership()
	if !ok {
		return 0, consensus.ErrNotLeader
	}
	gen := st.Allocation.Generation
	start := time.Now()
	for done := 0; done < n; {
		k := min(batch, n-done)
		cmds := make([]consensus.Command, k)
		for i := range cmds {
			gen++
			jobs := make(map[string][]consensus.Slot, benchJobs)
			for j := range benchJobs {
				jobs[fmt.Sprintf("bench-job-%d", j)] = []consensus.Slot{{
					Node: fmt.Sprintf("bench-node-%d", (j+int(gen))%benchNodes), GPUs: 1 + int(gen)%2}}
			}
			cmds[i] = &consensus.CommitAllocation{Generation: gen, Term: term, Jobs: jobs}
		}
		if err := applyAll(ctx, srv, cmds); err != nil {
			return 0, err
		}
		done += k
	}
	return time.Since(start).Seconds(), nil
}

func applyAll(ctx context.Context, srv *consensus.Server, cmds []consensus.Command) error {
	if len(cmds) == 0 {
		return nil
	}
	res, err := srv.Apply(ctx, cmds...)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
