package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/schollz/progressbar/v3"
	"gonum.org/v1/gonum/stat"

	"pollux/cluster/pki"
)

// ErrConfig is returned for unusable options.
var ErrConfig = errors.New("failover: bad options")

// Report is what `pollux bench failover --json` prints.
type Report struct {
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
	// ThroughputRestarts counts throughput runs started over because the
	// leader changed during them.
	ThroughputRestarts int `json:"throughput_restarts"`
	// TLS says whether the servers ran mutual TLS on their Raft ports
	// (and the benchmark's own HTTP control channel).
	TLS bool `json:"tls"`
	// Plaintext is the same benchmark without TLS, run right after (the
	// baseline of the cost of TLS), and TLSCost compares the two.
	Plaintext *Report  `json:"plaintext,omitempty"`
	TLSCost   *TLSCost `json:"tls_cost,omitempty"`
	// StatusMedianS and StatusMaxS time statusSamples status requests
	// to the servers, each on a new connection, before the kills;
	// StatusFailed counts those that failed.
	StatusMedianS float64 `json:"status_median_s"`
	StatusMaxS    float64 `json:"status_max_s"`
	StatusFailed  int     `json:"status_failed"`
	// Flood is the silent connections held from FloodSource to each
	// server's Raft and HTTP port during the run (0: none).
	Flood int `json:"flood"`
	// Flooded is the same benchmark under a flood of Options.Flood
	// connections per port, run after this one (--flood).
	Flooded *Report `json:"flooded,omitempty"`
}

// TLSCost is the TLS run's figures over the plaintext run's.
type TLSCost struct {
	// MedianRatio is the TLS median failover over the plaintext one.
	MedianRatio float64 `json:"median_ratio"`
	// AllocsRatio is the TLS allocation rate over the plaintext one.
	AllocsRatio float64 `json:"allocs_ratio"`
}

// Options configure the benchmark.
type Options struct {
	// Servers (at least 3), Trials (leader kills, at least 1), Allocs
	// (allocations of the throughput run, 0 skips it) and Batch (pipelined
	// per batch, at least 1).
	Servers, Trials, Allocs, Batch int
	// Heartbeat, Election and Lease are the Raft timeouts.
	Heartbeat, Election, Lease time.Duration
	// Keep keeps the data directories and logs (their path goes to notes).
	Keep bool
	// Insecure runs the plaintext benchmark only. Otherwise the servers
	// run mutual TLS (a CA and certificates made in the temporary
	// directory), and Baseline runs the same benchmark without TLS right
	// after and reports the cost of TLS.
	Insecure, Baseline bool
	// Flood, if positive, runs the benchmark again under a flood of this
	// many silent connections per Raft and HTTP port (Report.Flooded).
	Flood int
	// Member returns the command that runs one server process with the
	// given arguments of the consensus-member command.
	Member func(args []string) *exec.Cmd
}

// Validate reports unusable options.
func (o Options) Validate() error {
	switch {
	case o.Servers < 3:
		return fmt.Errorf("%w: %d servers: need at least 3 to survive a kill", ErrConfig, o.Servers)
	case o.Trials < 1:
		return fmt.Errorf("%w: %d trials: need at least 1", ErrConfig, o.Trials)
	case o.Allocs < 0 || o.Batch < 1:
		return fmt.Errorf("%w: allocs %d, batch %d: need allocs >= 0, batch >= 1", ErrConfig, o.Allocs, o.Batch)
	case o.Lease > o.Heartbeat || o.Heartbeat < 5*time.Millisecond || o.Election < o.Heartbeat:
		return fmt.Errorf("%w: timeouts: need 5ms <= heartbeat <= election and lease <= heartbeat", ErrConfig)
	case o.Flood < 0 || o.Flood > 3000:
		return fmt.Errorf("%w: flood %d: need 0 to 3000 connections per port", ErrConfig, o.Flood)
	case o.Member == nil:
		return fmt.Errorf("%w: no member command", ErrConfig)
	}
	return nil
}

// benchMember is one server process of the benchmark cluster.
type benchMember struct {
	id, dir, raftAddr, httpAddr string
	scheme                      string // of httpAddr's URLs
	cmd                         *exec.Cmd
	stdin                       io.WriteCloser
	exited                      chan struct{}
}

// throughputAttempts bounds the throughput runs of one benchmark.
const throughputAttempts = 3

// Run runs the benchmark (over TLS unless o.Insecure, then the plaintext
// baseline if o.Baseline); progress gets the progress bar, notes the
// notes.
func Run(ctx context.Context, o Options, progress, notes io.Writer) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	rep, err := run(ctx, o, !o.Insecure, 0, progress, notes)
	if err != nil {
		return rep, err
	}
	if o.Flood > 0 {
		flooded, err := run(ctx, o, !o.Insecure, o.Flood, progress, notes)
		if err != nil {
			return rep, fmt.Errorf("failover: under a flood: %w", err)
		}
		rep.Flooded = &flooded
	}
	if o.Insecure || !o.Baseline {
		return rep, nil
	}
	plain, err := run(ctx, o, false, 0, progress, notes)
	if err != nil {
		return rep, fmt.Errorf("failover: plaintext baseline: %w", err)
	}
	rep.Plaintext = &plain
	rep.TLSCost = &TLSCost{MedianRatio: rep.MedianS / plain.MedianS}
	if plain.AllocsPerS > 0 {
		rep.TLSCost.AllocsRatio = rep.AllocsPerS / plain.AllocsPerS
	}
	return rep, nil
}

// run runs the benchmark once, over TLS (a CA and certificates made in
// its temporary directory) or plaintext, under a flood of flood
// connections per port if positive.
func run(ctx context.Context, o Options, withTLS bool, flood int, progress, notes io.Writer) (rep Report, err error) {
	tmp, err := os.MkdirTemp("", "pollux-failover-")
	if err != nil {
		return rep, fmt.Errorf("failover: %w", err)
	}
	if o.Keep {
		fmt.Fprintf(notes, "data and logs kept in %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}

	ids := make([]string, o.Servers)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	scheme, client := "http://", &http.Client{Timeout: 30 * time.Second}
	secArgs := func(string) []string { return []string{"--insecure"} }
	if withTLS {
		bundle, err := pki.DevBundle(filepath.Join(tmp, "tls"), ids, nil)
		if err != nil {
			return rep, fmt.Errorf("failover: %w", err)
		}
		if client, err = bundle.HTTPClient(30 * time.Second); err != nil {
			return rep, fmt.Errorf("failover: %w", err)
		}
		scheme = "https://"
		secArgs = func(id string) []string { return bundle.Flags(id)[:6] } // --ca, --cert, --key: no gossip here
	}
	defer client.CloseIdleConnections()

	members := make([]*benchMember, o.Servers)
	var peers []string
	for i := range members {
		m := &benchMember{id: ids[i], dir: filepath.Join(tmp, ids[i]), scheme: scheme}
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
		return append([]string{"consensus-member", "--id", m.id, "--dir", m.dir, "--raft", m.raftAddr, "--http", m.httpAddr,
			"--peers", strings.Join(peers, ","), "--bootstrap=" + strconv.FormatBool(bootstrap),
			"--heartbeat", o.Heartbeat.String(), "--election", o.Election.String(), "--lease", o.Lease.String()},
			secArgs(m.id)...)
	}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	for i, m := range members {
		if err := m.start(o.Member, args(m, i == 0), tmp); err != nil {
			return rep, err
		}
	}
	leader, err := waitLeader(ctx, client, members)
	if err != nil {
		return rep, err
	}
	rep = Report{
		TLS: withTLS, Servers: o.Servers, Trials: o.Trials, Batch: o.Batch, Flood: flood,
		HeartbeatMS: o.Heartbeat.Milliseconds(), ElectionMS: o.Election.Milliseconds(), LeaseMS: o.Lease.Milliseconds(),
	}
	if flood > 0 {
		f := newFlooder(ctx, flood)
		for _, m := range members {
			f.aim(m.raftAddr)
			f.aim(m.httpAddr)
		}
		defer func() {
			fmt.Fprintln(notes, "bench failover: "+f.note())
			f.stop()
		}()
		// Let the flood fill the ports before anything is timed.
		sleep(ctx, 3*time.Second)
		fmt.Fprintln(notes, "bench failover: "+f.note())
	}
	// A leader change during the throughput run (an election on a loaded
	// machine) fences its allocations (stale term): the run starts over
	// on the new leader, at most throughputAttempts times, and the
	// restarts are reported.
	for attempt := 1; o.Allocs > 0; attempt++ {
		if err := waitCaughtUp(ctx, client, members); err != nil {
			return rep, err
		}
		var tr allocsResult
		url := fmt.Sprintf("%s%s/bench/allocs?n=%d&batch=%d", scheme, leader.httpAddr, o.Allocs, o.Batch)
		err := postJSON(ctx, client, url, "", &tr)
		if err == nil {
			rep.Allocations, rep.AllocsPerS = tr.N, float64(tr.N)/tr.Seconds
			break
		}
		if attempt == throughputAttempts {
			return rep, fmt.Errorf("failover: throughput run (attempt %d): %w", attempt, err)
		}
		fmt.Fprintf(notes, "bench failover: throughput run restarted: %v\n", err)
		rep.ThroughputRestarts++
		if leader, err = waitLeader(ctx, client, members); err != nil {
			return rep, err
		}
	}

	rep.StatusMedianS, rep.StatusMaxS, rep.StatusFailed = statusLatency(ctx, client, members)

	bar := progressbar.NewOptions(o.Trials,
		progressbar.OptionSetWriter(progress),
		progressbar.OptionSetDescription("leader kills"),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
	)
	for trial := range o.Trials {
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
			return rep, fmt.Errorf("failover: killing %s: %w", leader.id, err)
		}
		killed := time.Now()
		// The write is an idempotent node registration: an attempt that
		// fails ambiguously (e.g. forwarded over a connection to the
		// dead leader) is simply sent again.
		url := fmt.Sprintf("%s%s/bench/write?node=trial-%d", scheme, survivor.httpAddr, trial)
		err = poll(ctx, "a write after the kill", func(ctx context.Context) (bool, error) {
			return postJSON(ctx, client, url, "", nil) == nil, nil
		})
		if err != nil {
			return rep, fmt.Errorf("failover: trial %d: %w", trial, err)
		}
		rep.SamplesS = append(rep.SamplesS, time.Since(killed).Seconds())
		<-leader.exited
		if err := leader.start(o.Member, args(leader, false), tmp); err != nil {
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
		return "", fmt.Errorf("failover: finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs the member's process. Its stdin is a pipe: when this process
// dies the pipe closes and the member exits, so nothing is left behind.
func (m *benchMember) start(member func([]string) *exec.Cmd, args []string, logDir string) error {
	logf, err := os.OpenFile(filepath.Join(logDir, m.id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	m.cmd = member(args)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if m.stdin, err = m.cmd.StdinPipe(); err != nil {
		logf.Close()
		return fmt.Errorf("failover: %w", err)
	}
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("failover: starting %s: %w", m.id, err)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.scheme+m.httpAddr+"/bench/status", nil)
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
			return fmt.Errorf("failover: waiting for %s: %w", what, ctx.Err())
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
				return false, fmt.Errorf("failover: server %s exited (see its log)", m.id)
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
