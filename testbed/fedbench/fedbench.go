package fedbench

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
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/fedlink"
	"pollux/cluster"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/consensus"
	"pollux/consensus/state"
)

// ErrConfig is returned for unusable options; ErrFailed for a run whose
// decisions did not all commit in both ledgers.
var (
	ErrConfig = errors.New("fedbench: bad options")
	ErrFailed = errors.New("fedbench: benchmark failed")
)

// Options configure a run. Zero fields take defaults.
type Options struct {
	// Labs (2-8, default 3) and Servers per lab in the decisions run
	// (1, 3 or 5; default 3).
	Labs, Servers int
	// Leases granted, renewed and reclaimed (default 200; at most 1000),
	// Concurrency at a time (default 4).
	Leases, Concurrency int
	// Trials of the loss detection (default 3; 0 with Exec nil skips it),
	// Interval the labs' bid exchange interval there (default 1 s).
	Trials   int
	Interval time.Duration
	// NoGossip runs the loss detection's labs without the federation's
	// gossip pool (bid exchange only).
	NoGossip bool
	// Exec starts `pollux ARGS` (the loss detection's labs).
	Exec func(args []string) *exec.Cmd
	// Dir holds the labs' files (default a temporary directory, removed).
	Dir string
}

func (o *Options) defaults() error {
	if o.Labs == 0 {
		o.Labs = 3
	}
	if o.Servers == 0 {
		o.Servers = 3
	}
	if o.Leases == 0 {
		o.Leases = 200
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	switch {
	case o.Labs < 2 || o.Labs > 8:
		return fmt.Errorf("%w: --labs %d, want 2-8", ErrConfig, o.Labs)
	case o.Servers != 1 && o.Servers != 3 && o.Servers != 5:
		return fmt.Errorf("%w: --servers %d, want 1, 3 or 5", ErrConfig, o.Servers)
	case o.Leases < 1 || o.Leases > 1000:
		return fmt.Errorf("%w: --leases %d, want 1-1000", ErrConfig, o.Leases)
	case o.Concurrency < 1 || o.Concurrency > 64:
		return fmt.Errorf("%w: --concurrency %d, want 1-64", ErrConfig, o.Concurrency)
	case o.Trials < 0 || o.Trials > 100:
		return fmt.Errorf("%w: --trials %d, want 0-100", ErrConfig, o.Trials)
	case o.Interval < 50*time.Millisecond || o.Interval > time.Minute:
		return fmt.Errorf("%w: --interval %v, want 50ms-1m", ErrConfig, o.Interval)
	}
	return nil
}

// Report is what `pollux bench federation --json` prints.
type Report struct {
	Labs          int `json:"labs"`
	ServersPerLab int `json:"servers_per_lab"`
	Leases        int `json:"leases"`
	Concurrency   int `json:"concurrency"`
	// Decisions is the grants, renewals and reclaims committed in both
	// parties' Raft logs (3 per lease), in Seconds.
	Decisions          int     `json:"decisions"`
	Seconds            float64 `json:"seconds"`
	LeaseDecisionsPerS float64 `json:"lease_decisions_per_s"`
	// Per operation, the median and 95th percentile time of one
	// two-cluster commit, in milliseconds.
	Latency map[string]Latency `json:"latency_ms"`
	// Verified says that every lease was read, ended as reclaimed, from
	// both parties' Raft states and none was left.
	Verified bool `json:"verified"`
	// Loss detection: the median and worst time from a lab's SIGKILL to
	// the first lab logging it lost, the samples, the bid interval and
	// how the loss is detected.
	LossDetectionS    float64   `json:"loss_detection_s"`
	LossDetectionMaxS float64   `json:"loss_detection_max_s"`
	LossSamplesS      []float64 `json:"loss_samples_s"`
	IntervalS         float64   `json:"interval_s"`
	LossDetector      string    `json:"loss_detector"`
	// LossDetectedBy counts the kills by what noticed them first, as the
	// observing lab logged it: "gossip" or "bids".
	LossDetectedBy map[string]int `json:"loss_detected_by,omitempty"`
	TLS            bool           `json:"tls"`
	Targets        Targets        `json:"targets"`
}

// Latency is a distribution of commit times.
type Latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// Targets are issue 17's.
type Targets struct {
	DecisionsPerS  float64 `json:"lease_decisions_per_s"`
	LossDetectionS float64 `json:"loss_detection_s"`
	Met            bool    `json:"met"`
}

// Run runs the benchmark; progress gets one line per step.
func Run(ctx context.Context, o Options, progress io.Writer) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "pollux-bench-federation-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	rep := &Report{Labs: o.Labs, ServersPerLab: o.Servers, Leases: o.Leases, Concurrency: o.Concurrency, TLS: true,
		IntervalS: o.Interval.Seconds(), Latency: map[string]Latency{},
		LossDetector: "the federation's WAN gossip pool (its servers gone from it) or the bid exchange (no bid for two intervals), whichever first",
		Targets:      Targets{DecisionsPerS: 50, LossDetectionS: 10}}
	if o.NoGossip {
		rep.LossDetector = "the bid exchange alone: no bid for two intervals (no gossip pool)"
	}
	if err := decisions(ctx, o, rep, progress); err != nil {
		return nil, err
	}
	if o.Exec != nil && o.Trials > 0 {
		if err := lossDetection(ctx, o, rep, progress); err != nil {
			return nil, err
		}
	}
	rep.Targets.Met = rep.Verified && rep.LeaseDecisionsPerS >= rep.Targets.DecisionsPerS &&
		(len(rep.LossSamplesS) == 0 || rep.LossDetectionMaxS <= rep.Targets.LossDetectionS)
	return rep, nil
}

func labName(i int) string { return fmt.Sprintf("lab-%d", i) }

// lab is one lab of the decisions run.
type lab struct {
	name    string
	bundle  *pki.Bundle
	servers []*consensus.Server
	leader  *consensus.Server
	ln      net.Listener
	link    *fedlink.Link
	hs      *http.Server
}

func decisions(ctx context.Context, o Options, rep *Report, progress io.Writer) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	labs := make([]*lab, o.Labs)
	defer func() {
		for _, l := range labs {
			if l == nil {
				continue
			}
			if l.hs != nil {
				_ = l.hs.Close()
			}
			if l.link != nil {
				l.link.Close()
			}
			for _, s := range l.servers {
				_ = s.Shutdown()
			}
		}
	}()
	nodes := o.Concurrency
	for i := range labs {
		l, err := newLab(ctx, filepath.Join(o.Dir, "decisions"), labName(i), o.Servers, nodes, quiet)
		labs[i] = l
		if err != nil {
			return err
		}
	}
	for _, l := range labs {
		if err := l.serve(ctx, o, labs, nodes, quiet); err != nil {
			return err
		}
	}
	fmt.Fprintf(progress, "%d labs of %d servers up; %d leases (grant, renew, reclaim), %d at a time\n", o.Labs, o.Servers, o.Leases, o.Concurrency)

	lender := labs[0]
	type sample struct {
		op federation.Op
		d  time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		errs    []error
		ids     = map[string][]string{} // borrower -> lease IDs
	)
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range o.Leases {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	begin := time.Now()
	var wg sync.WaitGroup
	for w := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", w)
			for i := range next {
				borrower := labs[1+i%(o.Labs-1)].name
				id := fmt.Sprintf("bench-%d", i)
				at := func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
				cmds := []federation.Command{
					{Op: federation.OpGrant, From: lender.name, Lease: id, Lender: lender.name, Borrower: borrower,
						Nodes: []federation.NodeGPUs{{Node: node, GPUs: 8}}, TTL: 300},
					{Op: federation.OpRenew, From: lender.name, Lease: id, TTL: 300},
					{Op: federation.OpReclaim, From: lender.name, Lease: id},
				}
				for _, c := range cmds {
					c.At = at()
					t0 := time.Now()
					err := lender.link.Commit(ctx, c)
					d := time.Since(t0)
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s of %s: %w", c.Op, id, err))
					} else {
						samples = append(samples, sample{c.Op, d})
					}
					mu.Unlock()
					if err != nil {
						break
					}
				}
				mu.Lock()
				ids[borrower] = append(ids[borrower], id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %d lease commands failed, the first: %w", ErrFailed, len(errs), errs[0])
	}
	rep.Decisions, rep.Seconds = len(samples), elapsed.Seconds()
	rep.LeaseDecisionsPerS = float64(len(samples)) / elapsed.Seconds()
	for _, op := range []federation.Op{federation.OpGrant, federation.OpRenew, federation.OpReclaim} {
		var ms []float64
		for _, s := range samples {
			if s.op == op {
				ms = append(ms, float64(s.d.Microseconds())/1000)
			}
		}
		rep.Latency[string(op)] = Latency{P50: quantile(ms, 0.5), P95: quantile(ms, 0.95)}
	}
	// The observer: every lab's ledger as its Raft state holds it.
	var all []string
	for _, l := range labs[1:] {
		all = append(all, ids[l.name]...)
		if err := ended(ctx, l, ids[l.name]); err != nil {
			return err
		}
	}
	if err := ended(ctx, lender, all); err != nil {
		return err
	}
	rep.Verified = true
	fmt.Fprintf(progress, "%d lease decisions committed in both labs' Raft logs in %.2f s: %.1f/s; every ledger checked\n",
		rep.Decisions, rep.Seconds, rep.LeaseDecisionsPerS)
	return nil
}

// ended checks, on every server of l, that the leases ids ended as
// reclaimed and that none is active.
func ended(ctx context.Context, l *lab, ids []string) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range l.servers {
		for {
			err := endedOn(s.LocalState(), ids)
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%w: %s server %s: %w", ErrFailed, l.name, s.ID(), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func endedOn(st *state.State, ids []string) error {
	if st.Fed == nil {
		return errors.New("no federation state")
	}
	ls := st.Fed.Ledger.State()
	if len(ls.Leases) > 0 {
		return fmt.Errorf("%d leases still active", len(ls.Leases))
	}
	why := map[string]federation.End{}
	for _, e := range ls.Ended {
		why[e.ID] = e.Why
	}
	for _, id := range ids {
		if why[id] != federation.EndReclaimed {
			return fmt.Errorf("lease %s: %q, want reclaimed", id, why[id])
		}
	}
	return nil
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// newLab makes a lab's CA and certificates, its Raft group (servers in
// this process, in-memory transport, bolt on disk), its nodes and its
// federation listener's socket.
func newLab(ctx context.Context, dir, name string, servers, nodes int, log *slog.Logger) (*lab, error) {
	l := &lab{name: name}
	var ids []string
	for i := range servers {
		ids = append(ids, fmt.Sprintf("s%d", i))
	}
	var err error
	if l.bundle, err = pki.DevLabBundle(filepath.Join(dir, name, "tls"), name, ids, nil); err != nil {
		return l, err
	}
	fwd := consensus.NewLocalForwarder()
	var trans []*raft.InmemTransport
	var cfg []raft.Server
	for _, id := range ids {
		addr, t := raft.NewInmemTransport(raft.ServerAddress(name + "/" + id))
		trans = append(trans, t)
		cfg = append(cfg, raft.Server{ID: raft.ServerID(id), Address: addr})
	}
	for i, a := range trans {
		for j, b := range trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i, id := range ids {
		c := consensus.DefaultConfig(raft.ServerID(id))
		c.Logger = log
		s, err := consensus.OpenDisk(c, filepath.Join(dir, name, id), trans[i], fwd)
		if err != nil {
			return l, err
		}
		l.servers = append(l.servers, s)
		fwd.Add(s)
	}
	if err := l.servers[0].Bootstrap(cfg); err != nil {
		return l, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for l.leader == nil {
		for _, s := range l.servers {
			if _, ok := s.Leadership(); ok {
				l.leader = s
			}
		}
		if time.Now().After(deadline) {
			return l, fmt.Errorf("%w: lab %s elected no leader", ErrFailed, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range nodes {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := l.leader.RegisterNode(c, state.Node{ID: fmt.Sprintf("n%d", i), GPUs: 8, Addresses: []string{"127.0.0.1:1"}})
		cancel()
		if err != nil {
			return l, err
		}
	}
	l.ln, err = net.Listen("tcp", "127.0.0.1:0")
	return l, err
}

// serve writes l's federation file (every other lab a peer), names the
// lab in its Raft state and serves its link.
func (l *lab) serve(ctx context.Context, o Options, labs []*lab, nodes int, log *slog.Logger) error {
	var f fedlink.File
	for _, p := range labs {
		if p != l {
			f.Peers = append(f.Peers, fedlink.PeerFile{Name: p.name, Addresses: []string{p.ln.Addr().String()}, CAFile: p.bundle.CA})
		}
	}
	f.Quota = federation.Quota{Nominal: nodes * 8, LendingLimit: nodes * 8, BorrowingLimit: nodes * 8 * len(labs)}
	raw, err := json.Marshal(f)
	if err != nil {
		return err
	}
	path := filepath.Join(l.bundle.Dir, "federation.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	fed, err := fedlink.Load(path, l.name)
	if err != nil {
		return err
	}
	creds, err := l.bundle.Credentials("s0")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(l.bundle.CA)
	if err != nil {
		return err
	}
	cas, err := pki.ParseCerts(ca)
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.leader.ApplyCommand(c, &state.SetLab{Name: l.name, CA: pki.Fingerprint(cas[0]), Quota: fed.Quota, Peers: fed.LabPeers()}); err != nil {
		return err
	}
	if l.link, err = fedlink.New(fedlink.Config{Name: l.name, Creds: creds, Federation: fed, Store: l.leader, Interval: o.Interval, Logger: log}); err != nil {
		return err
	}
	tc, err := creds.FederationServerConfig(fed.Pools)
	if err != nil {
		return err
	}
	l.hs = &http.Server{Handler: l.link, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	ln := pki.NewListener(l.ln, tc, pki.ListenerOptions{Channel: pki.ChannelFederation, Logger: log})
	go func() { _ = l.hs.Serve(ln) }()
	return nil
}

// proc is one `pollux server` process of the loss detection.
type proc struct {
	cmd  *exec.Cmd
	args []string
}

// lossDetection runs one-server labs as processes and SIGKILLs one at a
// time, timing until the first lab logs it lost.
func lossDetection(ctx context.Context, o Options, rep *Report, progress io.Writer) error {
	dir := filepath.Join(o.Dir, "loss")
	bundles := make([]*pki.Bundle, o.Labs)
	addrs := make([]string, o.Labs)
	for i := range bundles {
		b, err := pki.DevLabBundle(filepath.Join(dir, labName(i), "tls"), labName(i), []string{"s0"}, nil)
		if err != nil {
			return err
		}
		bundles[i] = b
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	gossip := make([]string, o.Labs)
	wanKey := filepath.Join(dir, "federation-gossip.key")
	if !o.NoGossip {
		key, err := cluster.NewKey()
		if err != nil {
			return err
		}
		if err := os.WriteFile(wanKey, []byte(key+"\n"), 0o600); err != nil {
			return err
		}
		for i := range gossip {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			gossip[i] = ln.Addr().String()
			ln.Close()
		}
	}
	events := newEventLog()
	procs := make([]*proc, o.Labs)
	defer func() {
		for _, p := range procs {
			if p != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}()
	for i := range procs {
		var f fedlink.File
		for j := range procs {
			if j != i {
				p := fedlink.PeerFile{Name: labName(j), Addresses: []string{addrs[j]}, CAFile: bundles[j].CA}
				if !o.NoGossip {
					p.Gossip = []string{gossip[j]}
				}
				f.Peers = append(f.Peers, p)
			}
		}
		raw, _ := json.Marshal(f)
		fedFile := filepath.Join(dir, labName(i), "federation.json")
		if err := os.WriteFile(fedFile, raw, 0o644); err != nil {
			return err
		}
		ports := make([]string, 2)
		for k := range ports {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			ports[k] = ln.Addr().String()
			ln.Close()
		}
		args := []string{"server", "--id", "s0", "--data-dir", filepath.Join(dir, labName(i), "data"), "--raft", ports[0], "--http", ports[1],
			"--peers", "s0=" + ports[0] + "=" + ports[1], "--bootstrap", "--log-level", "info",
			"--cluster", labName(i), "--federation", fedFile, "--federation-addr", addrs[i], "--federation-interval", o.Interval.String()}
		args = append(args, bundles[i].Flags("s0")...)
		if !o.NoGossip {
			_, port, _ := net.SplitHostPort(gossip[i])
			args = append(args, "--federation-gossip-key", wanKey, "--federation-gossip-port", port)
		}
		procs[i] = &proc{args: args}
		if err := start(o, procs[i], i, events); err != nil {
			return err
		}
	}
	observer := labName(0)
	for j := 1; j < o.Labs; j++ {
		if _, err := events.wait(ctx, observer, "peer up", labName(j), time.Time{}, 60*time.Second); err != nil {
			return err
		}
	}
	fmt.Fprintf(progress, "%d lab processes exchange bids every %v\n", o.Labs, o.Interval)
	for t := range o.Trials {
		victim := 1 + t%(o.Labs-1)
		time.Sleep(3 * o.Interval) // a few exchanges since the last restart
		killed := time.Now()
		_ = procs[victim].cmd.Process.Signal(syscall.SIGKILL)
		_ = procs[victim].cmd.Wait()
		ev, err := events.wait(ctx, observer, "peer lost", labName(victim), killed, 60*time.Second)
		if err != nil {
			return err
		}
		d := ev.at.Sub(killed).Seconds()
		rep.LossSamplesS = append(rep.LossSamplesS, d)
		if rep.LossDetectedBy == nil {
			rep.LossDetectedBy = map[string]int{}
		}
		rep.LossDetectedBy[ev.by]++
		fmt.Fprintf(progress, "trial %d: %s killed, %s noticed after %.2f s (%s)\n", t+1, labName(victim), observer, d, ev.by)
		restarted := time.Now()
		if err := start(o, procs[victim], victim, events); err != nil {
			return err
		}
		if _, err := events.wait(ctx, observer, "peer up", labName(victim), restarted, 60*time.Second); err != nil {
			return err
		}
	}
	rep.LossDetectionS = quantile(rep.LossSamplesS, 0.5)
	rep.LossDetectionMaxS = slices.Max(rep.LossSamplesS)
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	}
	return nil
}

// start starts (or restarts) a lab process, feeding its log to events.
func start(o Options, p *proc, i int, events *eventLog) error {
	p.cmd = o.Exec(p.args)
	p.cmd.Stdout = io.Discard
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go events.read(labName(i), stderr)
	return nil
}

// eventLog records when each lab logged a peer up or lost.
type eventLog struct {
	mu     sync.Mutex
	cond   *sync.Cond
	events []event
}

type event struct {
	lab, kind, peer string
	// by is what noticed a loss: "gossip" or "bids".
	by string
	at time.Time
}

func newEventLog() *eventLog {
	e := &eventLog{}
	e.cond = sync.NewCond(&e.mu)
	return e
}

func (e *eventLog) read(labName string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		now := time.Now()
		for _, kind := range []string{"peer up", "peer lost"} {
			if !strings.Contains(line, "federation: "+kind) {
				continue
			}
			i := strings.Index(line, " peer=")
			if i < 0 {
				continue
			}
			peer, _, _ := strings.Cut(line[i+len(" peer="):], " ")
			by := "bids"
			if strings.Contains(line, "gossip") {
				by = "gossip"
			}
			e.mu.Lock()
			e.events = append(e.events, event{lab: labName, kind: kind, peer: peer, by: by, at: now})
			e.cond.Broadcast()
			e.mu.Unlock()
		}
	}
}

// wait returns the event of lab logging kind about peer after since.
func (e *eventLog) wait(ctx context.Context, lab, kind, peer string, since time.Time, limit time.Duration) (event, error) {
	deadline := time.Now().Add(limit)
	stop := time.AfterFunc(limit, func() { e.mu.Lock(); e.cond.Broadcast(); e.mu.Unlock() })
	defer stop.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		for _, ev := range e.events {
			if ev.lab == lab && ev.kind == kind && ev.peer == peer && ev.at.After(since) {
				return ev, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return event{}, fmt.Errorf("%w: %s did not log %s %q within %v", ErrFailed, lab, peer, kind, limit)
		}
		e.cond.Wait()
	}
}
