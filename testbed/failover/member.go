package failover

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
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
	// CA, Cert and Key are the files of the server's credentials: the
	// Raft port (Raft RPC and forwarded writes) runs mutual TLS and the
	// HTTP listener HTTPS with the same certificate. Insecure, instead,
	// runs both in plaintext; one of the two is required.
	CA, Cert, Key string
	Insecure      bool
}

// Validate reports unusable options (ErrConfig).
func (o MemberOptions) Validate() error {
	if _, err := ParsePeers(o.Peers); err != nil {
		return err
	}
	switch {
	case o.Insecure && o.CA+o.Cert+o.Key == "":
	case !o.Insecure && o.CA != "" && o.Cert != "" && o.Key != "":
	default:
		return fmt.Errorf("%w: consensus-member: want --ca, --cert and --key, or --insecure", ErrConfig)
	}
	return nil
}

// RunMember runs one server until stdin closes (the benchmark stopped or
// died). Its log goes to logw.
func RunMember(o MemberOptions, stdin io.Reader, logw io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	servers, _ := ParsePeers(o.Peers)
	logger := slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var raftTLS *consensus.TLS
	var apiTLS *tls.Config
	if !o.Insecure {
		creds, err := pki.LoadCredentials(o.CA, o.Cert, o.Key)
		if err != nil {
			return fmt.Errorf("failover: %w", err)
		}
		srvCfg, err1 := creds.ServerConfig(pki.ChannelRaft)
		cliCfg, err2 := creds.ClientConfig(pki.ChannelRaft)
		api, err3 := creds.ServerConfig(pki.ChannelAPI)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("failover: %w", err)
		}
		raftTLS, apiTLS = &consensus.TLS{Server: srvCfg, Client: cliCfg}, api
		raftTLS.Gate = pki.NewGate(pki.GateOptions{Channel: pki.ChannelRaft, Logger: logger, Member: peerAddrs(servers)})
	}
	cfg := consensus.DefaultConfig(raft.ServerID(o.ID))
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = o.Heartbeat, o.Election, o.Lease
	cfg.Logger = logger
	trans, err := consensus.ListenTCP(o.Raft, cfg, raftTLS)
	if err != nil {
		return err
	}
	srv, err := consensus.OpenDisk(cfg, o.Dir, trans, trans.Forwarder())
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
	if apiTLS != nil {
		// The server's API gate: the members' room, and a cap on the
		// connections a source that is not one holds.
		gate := pki.NewGate(pki.GateOptions{Channel: pki.ChannelAPI, Logger: logger, Member: peerAddrs(servers), ConnsPerSource: 64})
		ln = pki.NewListener(ln, apiTLS, pki.ListenerOptions{Channel: pki.ChannelAPI, Logger: logger, Gate: gate})
	}
	// The limits of the server's API (cmd/pollux), but a write timeout
	// that lets the throughput run answer when it is done.
	hs := &http.Server{Handler: memberHandler(srv), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 6 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
	return nil
}

// peerAddrs tells the addresses of the servers' Raft ports, the
// members whose room the gates keep (a server's gates learn them from
// Raft's configuration).
func peerAddrs(servers []raft.Server) func(netip.Addr) bool {
	var addrs []netip.Addr
	for _, s := range servers {
		if ap, err := netip.ParseAddrPort(string(s.Address)); err == nil {
			addrs = append(addrs, ap.Addr())
		}
	}
	return func(a netip.Addr) bool { return slices.Contains(addrs, a.Unmap()) }
}

// ParsePeers parses id=raftaddr=httpaddr,... into the Raft servers (the
// HTTP addresses are the benchmark's; writes are forwarded over the Raft
// port).
func ParsePeers(s string) ([]raft.Server, error) {
	var servers []raft.Server
	for _, p := range strings.Split(s, ",") {
		parts := strings.Split(p, "=")
		if len(parts) != 3 || parts[0] == "" {
			return nil, fmt.Errorf("%w: --peers: %q is not id=raftaddr=httpaddr", ErrConfig, p)
		}
		servers = append(servers, raft.Server{ID: raft.ServerID(parts[0]), Address: raft.ServerAddress(parts[1])})
	}
	return servers, nil
}

// memberHandler serves the benchmark's endpoints.
func memberHandler(srv *consensus.Server) http.Handler {
	mux := http.NewServeMux()
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
		if err := srv.RegisterNode(ctx, state.Node{ID: req.URL.Query().Get("node"), GPUs: 1}); err != nil {
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
	var setup []state.Command
	for i := range benchNodes {
		setup = append(setup, &state.RegisterNode{Node: state.Node{ID: fmt.Sprintf("bench-node-%d", i), GPUs: 8, Health: state.Alive}})
	}
	st := srv.LocalState()
	for j := range benchJobs {
		id := fmt.Sprintf("bench-job-%d", j)
		if _, ok := st.Jobs[id]; ok {
			continue
		}
		setup = append(setup, &state.SubmitJob{ID: id, Spec: state.JobSpec{App: "bench", MinReplicas: 1, MaxReplicas: 4,
			Limits: goodput.Limits{InitBatch: 64, MaxBatch: 1024, MinLocal: 32, MaxLocal: 256}, CheckpointDir: "/checkpoints/" + id}})
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
		cmds := make([]state.Command, k)
		for i := range cmds {
			gen++
			jobs := make(map[string][]state.Slot, benchJobs)
			for j := range benchJobs {
				jobs[fmt.Sprintf("bench-job-%d", j)] = []state.Slot{{
					Node: fmt.Sprintf("bench-node-%d", (j+int(gen))%benchNodes), GPUs: 1 + int(gen)%2}}
			}
			cmds[i] = &state.CommitAllocation{Generation: gen, Term: term, Jobs: jobs}
		}
		if err := applyAll(ctx, srv, cmds); err != nil {
			return 0, err
		}
		done += k
	}
	return time.Since(start).Seconds(), nil
}

func applyAll(ctx context.Context, srv *consensus.Server, cmds []state.Command) error {
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
