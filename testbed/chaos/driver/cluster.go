package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pollux/actors/api"
	"pollux/actors/launch"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/proc"
)

// member is one server or agent: its fixed command line, and the process
// of its current incarnation.
type member struct {
	role history.Role
	id   string
	args []string
	// http is a server's API address.
	http string
	// ports are every port it listens on (raft, http, gossip, actor).
	ports []int

	mu     sync.Mutex
	p      *proc.Proc
	inc    uint64
	exit   chan struct{} // closed once the current incarnation's exit is recorded
	paused bool          // SIGSTOPped: its sockets accept but never answer
}

// serving returns whether m runs and is not paused.
func (m *member) serving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p != nil && !m.p.Exited() && !m.paused
}

// current returns the running process and its incarnation (nil if dead).
func (m *member) current() (*proc.Proc, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil || m.p.Exited() {
		return nil, m.inc
	}
	return m.p, m.inc
}

// cluster is the set of members of a run and the history they record to.
type cluster struct {
	o       Options
	log     *slog.Logger
	group   *proc.Group
	rec     *history.Recorder
	clock   history.Monotonic
	histEnv []string
	path    string
	servers []*member
	agents  []*member
	client  http.Client

	trackMu sync.Mutex
	tracked map[int]bool
}

// newCluster lays out the members (ports, arguments); nothing starts.
func newCluster(o Options, dir string, log *slog.Logger) (*cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	clock, err := history.NewEpoch()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "history.jsonl")
	rec, err := history.Open(path, "harness", clock)
	if err != nil {
		return nil, err
	}
	c := &cluster{o: o, log: log, group: proc.NewGroup(), rec: rec, clock: clock, histEnv: clock.Env(path), path: path,
		client: http.Client{Timeout: time.Second}, tracked: map[int]bool{}}
	ports, err := launch.FreePorts(4*o.Servers + 2*o.Agents)
	if err != nil {
		rec.Close()
		return nil, err
	}
	addr := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	var peers, gossip []string
	for i := range o.Servers {
		peers = append(peers, fmt.Sprintf("s%d=%s=%s", i, addr(ports[4*i]), addr(ports[4*i+1])))
		gossip = append(gossip, addr(ports[4*i+2]))
	}
	var agentGossip []string
	for i := range o.Agents {
		agentGossip = append(agentGossip, addr(ports[4*o.Servers+2*i]))
	}
	ts := strconv.FormatFloat(o.TimeScale, 'g', -1, 64)
	for i := range o.Servers {
		id := fmt.Sprintf("s%d", i)
		p := ports[4*i : 4*i+4]
		// Every other member is a gossip seed: after a cold restart the
		// servers find the agents again through it.
		join := append(slices.Delete(slices.Clone(gossip), i, i+1), agentGossip...)
		c.servers = append(c.servers, &member{role: history.Server, id: id, http: addr(p[1]), ports: p,
			args: []string{"server", "--id", id, "--data-dir", filepath.Join(dir, id),
				"--raft", addr(p[0]), "--http", addr(p[1]), "--gossip-port", strconv.Itoa(p[2]), "--actor-port", strconv.Itoa(p[3]),
				"--peers", strings.Join(peers, ","), "--bootstrap", "--checkpoint-root", filepath.Join(dir, "checkpoints"),
				"--fast-gossip", "--interval", o.Interval.String(),
				"--time-scale", ts, "--log-level", o.LogLevel, "--join", strings.Join(join, ",")}})
	}
	for i := range o.Agents {
		id := fmt.Sprintf("a%d", i)
		p := ports[4*o.Servers+2*i : 4*o.Servers+2*i+2]
		c.agents = append(c.agents, &member{role: history.Agent, id: id, ports: p,
			args: []string{"agent", "--name", id, "--gpus", strconv.Itoa(o.GPUsPerAgent), "--rack", fmt.Sprintf("r%d", i%2),
				"--data-dir", filepath.Join(dir, id),
				"--gossip-port", strconv.Itoa(p[0]), "--actor-port", strconv.Itoa(p[1]), "--join", strings.Join(gossip, ","),
				"--fast-gossip", "--time-scale", ts, "--restart-cost", o.RestartCost.String(), "--grace", o.Grace.String(),
				"--worker-exec", strings.Join(o.Exec, ","), "--log-level", o.LogLevel}})
	}
	return c, nil
}

// readyWriter closes ready at the first newline written to it.
type readyWriter struct {
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(b []byte) (int, error) {
	if bytes.IndexByte(b, '\n') >= 0 {
		w.once.Do(func() { close(w.ready) })
	}
	return len(b), nil
}

// start starts m's next incarnation and waits for its ready line. fault
// and fseq mark a restart that is part of a fault.
func (c *cluster) start(ctx context.Context, m *member, fault string, fseq int) error {
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(c.path), m.id+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("driver: %w", err)
	}
	rw := &readyWriter{ready: make(chan struct{})}
	m.mu.Lock()
	m.inc++
	inc := m.inc
	t0 := c.rec.Now()
	p, err := c.group.Start(proc.Spec{Name: string(m.role) + "/" + m.id, Path: c.o.Exec[0],
		Args: append(slices.Clone(c.o.Exec[1:]), m.args...), Env: append(slices.Clone(c.o.Env), c.histEnv...),
		Stdout: rw, Stderr: logf})
	if err != nil {
		m.mu.Unlock()
		logf.Close()
		return err
	}
	m.p = p
	exit := make(chan struct{})
	m.exit = exit
	m.mu.Unlock()
	c.record(t0, history.Event{Kind: history.ProcStart, Role: m.role, ID: m.id, PID: p.PID(), Inc: inc, Fault: fault, FSeq: fseq})
	go func() {
		<-p.Done()
		st, _ := p.Wait(time.Second)
		e := history.Event{Kind: history.ProcExit, Role: m.role, ID: m.id, PID: p.PID(), Inc: inc}
		if st != nil {
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				e.Sig = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
			} else {
				e.Exit = st.ExitCode()
			}
		}
		c.record(c.rec.Now(), e)
		logf.Close()
		close(exit)
	}()
	select {
	case <-rw.ready:
		return nil
	case <-p.Done():
		return fmt.Errorf("%w: %s/%s exited before it was ready; see %s", ErrCluster, m.role, m.id, logf.Name())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%w: %s/%s not ready after 30s; see %s", ErrCluster, m.role, m.id, logf.Name())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// record appends a harness event; a failure is logged.
func (c *cluster) record(t time.Duration, e history.Event) {
	if err := c.rec.RecordAt(t, e); err != nil {
		c.log.Warn("driver: history", "err", err)
	}
}

// signal records and sends sig to m's current process group.
func (c *cluster) signal(m *member, sig syscall.Signal, fault string, fseq int) error {
	p, inc := m.current()
	if p == nil {
		return fmt.Errorf("%w: %s/%s is not running", ErrCluster, m.role, m.id)
	}
	c.record(c.rec.Now(), history.Event{Kind: history.Signal, Role: m.role, ID: m.id, PID: p.PID(), Inc: inc,
		Sig: strings.TrimPrefix(unix.SignalName(sig), "SIG"), Fault: fault, FSeq: fseq})
	err := p.Signal(sig)
	m.mu.Lock()
	m.paused = sig == syscall.SIGSTOP
	m.mu.Unlock()
	return err
}

// kill is kill -9 of m; it returns once the exit is recorded.
func (c *cluster) kill(m *member, fault string, fseq int) error {
	if err := c.signal(m, syscall.SIGKILL, fault, fseq); err != nil {
		return err
	}
	return c.waitExit(m, 10*time.Second)
}

// waitExit waits until m's current incarnation has exited and its exit
// is recorded.
func (c *cluster) waitExit(m *member, timeout time.Duration) error {
	m.mu.Lock()
	exit := m.exit
	m.mu.Unlock()
	if exit == nil {
		return nil
	}
	select {
	case <-exit:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%w: %s/%s still running %s after the signal", ErrCluster, m.role, m.id, timeout)
	}
}

// events reads the history recorded so far (every complete line).
func (c *cluster) events() ([]history.Event, error) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	// A line being appended right now may be torn: read up to the last
	// newline.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	return history.Decode(bytes.NewReader(b), c.path)
}

// running returns the workers the history shows running now.
func (c *cluster) running() ([]history.Event, error) {
	ev, err := c.events()
	if err != nil {
		return nil, err
	}
	ws := check.Running(ev, c.rec.Now())
	c.trackMu.Lock()
	for _, w := range ws {
		if !c.tracked[w.PID] {
			// Workers lead their own process group: Close kills it
			// whatever happened to their agent.
			c.tracked[w.PID] = true
			c.group.Track(w.PID)
		}
	}
	c.trackMu.Unlock()
	return ws, nil
}

// reapOrphans waits until every worker the history shows running on
// node (an agent that is dead) is gone, killing survivors, and records
// their stops. Workers die with their agent (Pdeathsig); the harness
// records what it observed.
func (c *cluster) reapOrphans(node string) error {
	ws, err := c.running()
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range ws {
		if w.Node != node {
			continue
		}
		if err := proc.WaitGone(w.PID, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%w: worker pid %d of job %s outlived its agent %s by 5s: killed", ErrCluster, w.PID, w.Job, node))
			_ = syscall.Kill(-w.PID, syscall.SIGKILL)
			if err := proc.WaitGone(w.PID, 5*time.Second); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		c.record(c.rec.Now(), history.Event{Kind: history.WorkerStop, Node: w.Node, PID: w.PID, Job: w.Job, Inc: w.Inc, Rank: w.Rank})
	}
	return errors.Join(errs...)
}

// status asks one server for its status.
func (c *cluster) status(ctx context.Context, m *member) (api.Status, error) {
	var st api.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.http+api.PathStatus, nil)
	if err != nil {
		return st, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%w: %s: status %s", ErrCluster, m.id, resp.Status)
	}
	return st, json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
}

// leader returns the server that says it leads (asked directly), waiting
// up to timeout for one.
func (c *cluster) leader(ctx context.Context, timeout time.Duration) (*member, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range c.servers {
			if !m.serving() {
				continue
			}
			if st, err := c.status(ctx, m); err == nil && st.Leader == m.id && st.Serving == m.id && !st.Stale {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: no leader within %s", ErrCluster, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitGPUs waits until a server reports want GPUs.
func (c *cluster) waitGPUs(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		for _, m := range c.servers {
			if p, _ := m.current(); p == nil {
				continue
			}
			if st, err := c.status(ctx, m); err == nil && st.GPUs == want && st.Leader != "" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the cluster did not report %d GPUs within %s", ErrCluster, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// submit posts a job spec to the live servers until one acknowledges
// it, and records the acknowledgement.
func (c *cluster) submit(ctx context.Context, job string, spec []byte) error {
	var errs []error
	for _, m := range c.servers {
		if !m.serving() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m.http+api.PathJobs, bytes.NewReader(spec))
		if err != nil {
			return err
		}
		cl := http.Client{Timeout: 5 * time.Second}
		resp, err := cl.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated,
			// A retry of a submission whose acknowledgement was lost.
			resp.StatusCode == http.StatusConflict:
			c.record(c.rec.Now(), history.Event{Kind: history.Submit, Job: job})
			return nil
		case resp.StatusCode < 500:
			return fmt.Errorf("%w: job %s refused: %s: %s", ErrCluster, job, resp.Status, bytes.TrimSpace(body))
		}
		errs = append(errs, fmt.Errorf("%s: %s: %s", m.id, resp.Status, bytes.TrimSpace(body)))
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no server is running"))
	}
	return fmt.Errorf("%w: job %s: %w", errUnavailable, job, errors.Join(errs...))
}

// errUnavailable is a submission no server could take now (none running,
// an election under way): it is retried later.
var errUnavailable = errors.New("driver: no server took the job")

// stop ends the run: SIGTERM to the agents (they stop their workers),
// then to the servers, then SIGKILL to whatever is left; the orphans of
// agents that had to be killed are reaped and recorded.
func (c *cluster) stop() error {
	var errs []error
	for _, group := range [][]*member{c.agents, c.servers} {
		for _, m := range group {
			if p, _ := m.current(); p != nil {
				_ = p.Cont() // never leave a paused process
				_ = c.signal(m, syscall.SIGTERM, "", 0)
			}
		}
		for _, m := range group {
			if err := c.waitExit(m, c.o.Grace+10*time.Second); err != nil {
				errs = append(errs, err)
				_ = c.signal(m, syscall.SIGKILL, "", 0)
				_ = c.waitExit(m, 5*time.Second)
			}
		}
	}
	for _, m := range c.agents {
		if err := c.reapOrphans(m.id); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.group.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// close kills everything at once (on error or interruption).
func (c *cluster) close() error {
	err := c.group.Close()
	return errors.Join(err, c.rec.Close())
}
