package main

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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/raft"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"gonum.org/v1/gonum/stat"

	"pollux/consensus"
	"pollux/optimizer/goodput"
)

func init() {
	benchCommands = append(benchCommands, newBenchFailoverCmd)
	subcommands = append(subcommands, newConsensusMemberCmd)
}

// failoverReport is what `pollux bench failover --json` prints.
type failoverReport struct {
	Servers     int       `json:"servers"`
	Trials      int       `json:"trials"`
	MedianS     float64   `json:"median_s"`
	P95S        float64   `json:"p95_s"`
	MaxS        float64   `json:"max_s"`
	MinS        float64   `json:"min_s"`
	MeanS       float64   `json:"mean_s"`
	SamplesS    []float64 `json:"samples_s"`
	HeartbeatMS int64     `json:"heartbeat_ms"`
	ElectionMS  int64     `json:"election_ms"`
	LeaseMS     int64     `json:"lease_ms"`
	// Allocations committed by the throughput run, at AllocsPerS.
	Allocations int     `json:"allocations"`
	Batch       int     `json:"batch"`
	AllocsPerS  float64 `json:"allocs_per_s"`
}

type failoverOpts struct {
	servers, trials, allocs, batch int
	heartbeat, election, lease     time.Duration
	keep                           bool
	// member returns the command that runs one server process with the
	// given arguments of the hidden consensus-member subcommand.
	member func(args []string) *exec.Cmd
}

// selfMember re-executes this binary.
func selfMember(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, args...)
}

func newBenchFailoverCmd() *cobra.Command {
	var (
		o      failoverOpts
		asJSON bool
	)
	d := consensus.DefaultConfig("")
	cmd := &cobra.Command{
		Use:   "failover",
		Short: "Kill the Raft leader of a real cluster repeatedly and time the next committed write; measure allocation commits per second",
		Long: `Starts --servers consensus servers as separate processes on 127.0.0.1 (TCP
transport, bolt log and file snapshots in temporary directories), first
measures how many allocations per second the leader commits (pipelined in
batches of --batch), then --trials times: SIGKILLs the leader, times from
the kill until a write sent to a surviving server commits through a new
leader, and restarts the killed server on its data directory.`,
		Args: failoverNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.servers < 3:
				return badInput(fmt.Errorf("--servers %d: need at least 3 to survive a kill", o.servers))
			case o.trials < 1:
				return badInput(fmt.Errorf("--trials %d: need at least 1", o.trials))
			case o.allocs < 0 || o.batch < 1:
				return badInput(fmt.Errorf("--allocs %d, --batch %d: need allocs >= 0, batch >= 1", o.allocs, o.batch))
			case o.lease > o.heartbeat || o.heartbeat < 5*time.Millisecond || o.election < o.heartbeat:
				return badInput(fmt.Errorf("timeouts: need 5ms <= heartbeat <= election and lease <= heartbeat"))
			}
			var progress io.Writer = cmd.ErrOrStderr()
			if asJSON {
				progress = io.Discard
			}
			rep, err := runFailover(cmd.Context(), o, progress, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return printFailover(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.servers, "servers", 3, "servers in the cluster")
	f.IntVar(&o.trials, "trials", 20, "leader kills")
	f.IntVar(&o.allocs, "allocs", 20000, "allocations to commit in the throughput run (0: skip it)")
	f.IntVar(&o.batch, "batch", 256, "allocations pipelined per batch in the throughput run")
	f.DurationVar(&o.heartbeat, "heartbeat", d.HeartbeatTimeout, "Raft heartbeat timeout")
	f.DurationVar(&o.election, "election", d.ElectionTimeout, "Raft election timeout")
	f.DurationVar(&o.lease, "lease", d.LeaderLeaseTimeout, "Raft leader lease timeout")
	f.BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	f.BoolVar(&o.keep, "keep", false, "keep the servers' data directories and logs (path printed on stderr)")
	o.member = selfMember
	return cmd
}

// failoverNoArgs refuses positional arguments as bad input (exit status 2).
func failoverNoArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return badInput(err)
	}
	return nil
}

func printFailover(w io.Writer, r failoverReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "servers\t%d\n", r.Servers)
	fmt.Fprintf(tw, "timeouts\theartbeat %d ms, election %d ms, lease %d ms\n", r.HeartbeatMS, r.ElectionMS, r.LeaseMS)
	fmt.Fprintf(tw, "leader kills\t%d\n", r.Trials)
	fmt.Fprintf(tw, "kill -> next commit\tmedian %.3f s, p95 %.3f s, max %.3f s (min %.3f s, mean %.3f s)\n", r.MedianS, r.P95S, r.MaxS, r.MinS, r.MeanS)
	if r.Allocations > 0 {
		fmt.Fprintf(tw, "allocations committed\t%d in batches of %d: %.0f /s\n", r.Allocations, r.Batch, r.AllocsPerS)
	}
	return tw.Flush()
}

// benchMember is one server process of the benchmark cluster.
type benchMember struct {
	id, dir, raftAddr, httpAddr string
	cmd                         *exec.Cmd
	stdin                       io.WriteCloser
	exited                      chan struct{}
}

// runFailover runs the benchmark; progress gets the progress bar, stderr
// the notes.
func runFailover(ctx context.Context, o failoverOpts, progress, stderr io.Writer) (rep failoverReport, err error) {
	tmp, err := os.MkdirTemp("", "pollux-failover-")
	if err != nil {
		return rep, fmt.Errorf("bench failover: %w", err)
	}
	if o.keep {
		fmt.Fprintf(stderr, "data and logs kept in %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	members := make([]*benchMember, o.servers)
	var peers []string
	for i := range members {
		m := &benchMember{id: fmt.Sprintf("s%d", i), dir: filepath.Join(tmp, fmt.Sprintf("s%d", i))}
		if m.raftAddr, err = freeAddr(); err != nil {
			return rep, err
		}
		if m.httpAddr, err = freeAddr(); err != nil {
			return rep, err
		}
		members[i] = m
		peers = append(peers, m.id+"="+m.raftAddr+"="+m.httpAddr)
	}
	args := func(m *benchMember, bootstrap bool) []string {
		return []string{"consensus-member", "--id", m.id, "--dir", m.dir, "--raft", m.raftAddr, "--http", m.httpAddr,
			"--peers", strings.Join(peers, ","), "--bootstrap=" + strconv.FormatBool(bootstrap),
			"--heartbeat", o.heartbeat.String(), "--election", o.election.String(), "--lease", o.lease.String()}
	}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	for i, m := range members {
		if err := m.start(o.member, args(m, i == 0), tmp); err != nil {
			return rep, err
		}
	}
	client := &http.Client{Timeout: 30 * time.Second}

	leader, err := waitLeader(ctx, client, members)
	if err != nil {
		return rep, err
	}
	rep = failoverReport{
		Servers: o.servers, Trials: o.trials, Batch: o.batch,
		HeartbeatMS: o.heartbeat.Milliseconds(), ElectionMS: o.election.Milliseconds(), LeaseMS: o.lease.Milliseconds(),
	}
	if o.allocs > 0 {
		if err := waitCaughtUp(ctx, client, members); err != nil {
			return rep, err
		}
		var tr allocsResult
		url := fmt.Sprintf("http://%s/bench/allocs?n=%d&batch=%d", leader.httpAddr, o.allocs, o.batch)
		if err := postJSON(ctx, client, url, "", &tr); err != nil {
			return rep, fmt.Errorf("bench failover: throughput run: %w", err)
		}
		rep.Allocations, rep.AllocsPerS = tr.N, float64(tr.N)/tr.Seconds
	}

	bar := progressbar.NewOptions(o.trials,
		progressbar.OptionSetWriter(progress),
		progressbar.OptionSetDescription("leader kills"),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
	)
	for trial := range o.trials {
		leader, err := waitLeader(ctx, client, members)
		if err != nil {
			return rep, err
		}
		if err := waitCaughtUp(ctx, client, members); err != nil {
			return rep, err
		}
		var survivor *benchMember
		for _, m := range members {
			if m != leader {
				survivor = m
				break
			}
		}
		if err := leader.cmd.Process.Kill(); err != nil {
			return rep, fmt.Errorf("bench failover: killing %s: %w", leader.id, err)
		}
		killed := time.Now()
		// The write is an idempotent node registration: an attempt that
		// fails ambiguously (e.g. forwarded over a connection to the
		// dead leader) is simply sent again.
		url := fmt.Sprintf("http://%s/bench/write?node=trial-%d", survivor.httpAddr, trial)
		err = poll(ctx, "a write after the kill", func(ctx context.Context) (bool, error) {
			return postJSON(ctx, client, url, "", nil) == nil, nil
		})
		if err != nil {
			return rep, fmt.Errorf("bench failover: trial %d: %w", trial, err)
		}
		rep.SamplesS = append(rep.SamplesS, time.Since(killed).Seconds())
		<-leader.exited
		if err := leader.start(o.member, args(leader, false), tmp); err != nil {
			return rep, err
		}
		_ = bar.Add(1)
	}
	_ = bar.Finish()

	sorted := slices.Clone(rep.SamplesS)
	slices.Sort(sorted)
	rep.MedianS = stat.Quantile(0.5, stat.Empirical, sorted, nil)
	rep.P95S = stat.Quantile(0.95, stat.Empirical, sorted, nil)
	rep.MinS, rep.MaxS = sorted[0], sorted[len(sorted)-1]
	rep.MeanS = stat.Mean(sorted, nil)
	return rep, nil
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago (the server process binds it shortly after).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench failover: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs the member's process. Its stdin is a pipe: when this process
// dies the pipe closes and the member exits, so nothing is left behind.
func (m *benchMember) start(member func([]string) *exec.Cmd, args []string, logDir string) error {
	logf, err := os.OpenFile(filepath.Join(logDir, m.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("bench failover: %w", err)
	}
	m.cmd = member(args)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if m.stdin, err = m.cmd.StdinPipe(); err != nil {
		logf.Close()
		return fmt.Errorf("bench failover: %w", err)
	}
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("bench failover: starting %s: %w", m.id, err)
	}
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}(m.cmd, m.exited)
	return nil
}

// stop asks the member to shut down (closing its stdin) and kills it if
// it has not exited after a grace period.
func (m *benchMember) stop() {
	if m.cmd == nil {
		return
	}
	_ = m.stdin.Close()
	select {
	case <-m.exited:
	case <-time.After(3 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

func (m *benchMember) alive() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// memberStatus is what a member's /bench/status answers.
type memberStatus struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Leader  string `json:"leader"`
	Term    uint64 `json:"term"`
	Applied uint64 `json:"applied"`
	Last    uint64 `json:"last"`
}

type allocsResult struct {
	N       int     `json:"n"`
	Seconds float64 `json:"seconds"`
}

func getStatus(ctx context.Context, client *http.Client, m *benchMember) (memberStatus, error) {
	var st memberStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.httpAddr+"/bench/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// poll calls cond every 10 ms until it reports done, fails, or 30 s pass.
func poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		done, err := cond(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench failover: waiting for %s: %w", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitLeader waits until every live member answers and names the same
// leader, which answers that it is the leader.
func waitLeader(ctx context.Context, client *http.Client, members []*benchMember) (*benchMember, error) {
	var leader *benchMember
	err := poll(ctx, "a leader", func(ctx context.Context) (bool, error) {
		leader = nil
		name := ""
		for _, m := range members {
			if !m.alive() {
				return false, fmt.Errorf("bench failover: server %s exited (see its log)", m.id)
			}
			st, err := getStatus(ctx, client, m)
			if err != nil || st.Leader == "" || (name != "" && st.Leader != name) {
				return false, nil
			}
			name = st.Leader
			if st.ID == st.Leader && st.State == raft.Leader.String() {
				leader = m
			}
		}
		return leader != nil, nil
	})
	return leader, err
}

// waitCaughtUp waits until every member has applied its whole log and all
// logs end at the same index.
func waitCaughtUp(ctx context.Context, client *http.Client, members []*benchMember) error {
	return poll(ctx, "servers to catch up", func(ctx context.Context) (bool, error) {
		var last uint64
		for i, m := range members {
			st, err := getStatus(ctx, client, m)
			if err != nil || st.Applied != st.Last || (i > 0 && st.Last != last) {
				return false, nil
			}
			last = st.Last
		}
		return true, nil
	})
}

func postJSON(ctx context.Context, client *http.Client, url, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// newConsensusMemberCmd is the hidden server process the benchmark
// starts: a consensus server on a data directory with Raft over TCP and
// an HTTP listener for forwarded writes and the benchmark's requests. It
// exits when its stdin closes.
func newConsensusMemberCmd() *cobra.Command {
	var (
		id, dir, raftAddr, httpAddr, peers string
		bootstrap                          bool
		heartbeat, election, lease         time.Duration
	)
	cmd := &cobra.Command{
		Use:    "consensus-member",
		Short:  "One consensus server process (used by pollux bench failover)",
		Hidden: true,
		Args:   failoverNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			servers, httpPeers, err := parsePeers(peers)
			if err != nil {
				return badInput(err)
			}
			logger := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			cfg := consensus.DefaultConfig(raft.ServerID(id))
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = heartbeat, election, lease
			cfg.Logger = logger
			trans, err := consensus.ListenTCP(raftAddr, cfg)
			if err != nil {
				return err
			}
			srv, err := consensus.OpenDisk(cfg, dir, trans, consensus.NewHTTPForwarder(nil, httpPeers))
			if err != nil {
				_ = trans.Close()
				return err
			}
			defer srv.Shutdown()
			if bootstrap {
				if err := srv.Bootstrap(servers); err != nil {
					return err
				}
			}
			ln, err := net.Listen("tcp", httpAddr)
			if err != nil {
				return fmt.Errorf("consensus-member: %w", err)
			}
			hs := &http.Server{Handler: memberHandler(srv), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = hs.Serve(ln) }()
			defer hs.Close()
			// Run until stdin closes (the benchmark stopped or died).
			_, _ = io.Copy(io.Discard, bufio.NewReader(cmd.InOrStdin()))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "server id")
	f.StringVar(&dir, "dir", "", "data directory")
	f.StringVar(&raftAddr, "raft", "127.0.0.1:0", "Raft TCP address")
	f.StringVar(&httpAddr, "http", "127.0.0.1:0", "HTTP address")
	f.StringVar(&peers, "peers", "", "every server as id=raftaddr=httpaddr, comma-separated")
	f.BoolVar(&bootstrap, "bootstrap", false, "bootstrap the cluster from --peers")
	f.DurationVar(&heartbeat, "heartbeat", 200*time.Millisecond, "Raft heartbeat timeout")
	f.DurationVar(&election, "election", 200*time.Millisecond, "Raft election timeout")
	f.DurationVar(&lease, "lease", 100*time.Millisecond, "Raft leader lease timeout")
	return cmd
}

func parsePeers(s string) ([]raft.Server, map[raft.ServerID]string, error) {
	var servers []raft.Server
	httpPeers := map[raft.ServerID]string{}
	for _, p := range strings.Split(s, ",") {
		parts := strings.Split(p, "=")
		if len(parts) != 3 || parts[0] == "" {
			return nil, nil, fmt.Errorf("--peers: %q is not id=raftaddr=httpaddr", p)
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
