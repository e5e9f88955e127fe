package launch

import (
	"bufio"
	"bytes"
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
	"sync"
	"syscall"
	"time"

	"pollux/actors/api"
)

// ErrConfig is returned by Start for unusable options.
var ErrConfig = errors.New("launch: bad options")

// Options describe the cluster to start.
type Options struct {
	// Exec is the program (and leading arguments) that runs `pollux`.
	Exec []string
	// Env is added to every process's environment.
	Env []string
	// Dir holds data directories and logs (one <name>.log per process).
	Dir string
	// Servers (default 3), Agents (default 2) and GPUsPerAgent (default
	// 4).
	Servers, Agents, GPUsPerAgent int
	// Interval is the scheduling interval (default 1 s); TimeScale the
	// emulated seconds per real second (default 100); RestartCost the
	// emulated start-up of a worker (default 30 s); Grace the SIGTERM to
	// SIGKILL delay (default 5 s).
	Interval    time.Duration
	TimeScale   float64
	RestartCost time.Duration
	Grace       time.Duration
	// Retain is the servers' --retain (0: keep finished jobs).
	Retain time.Duration
	// LogLevel of the processes (default "info").
	LogLevel string
}

// Process is one started server or agent.
type Process struct {
	Name string
	// HTTP and Raft are a server's API and Raft addresses (empty for
	// agents); Gossip its gossip address.
	HTTP   string
	Raft   string
	Gossip string
	Log    string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	killed bool
}

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Cluster is a started cluster.
type Cluster struct {
	Servers []*Process
	Agents  []*Process
	opts    Options
	client  http.Client
	mu      sync.Mutex
	all     []*Process // every process started, for Stop
	isAgent map[*Process]bool
}

func (o *Options) defaults() error {
	if len(o.Exec) == 0 || o.Dir == "" {
		return fmt.Errorf("%w: Exec and Dir are required", ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Servers, 3)
	def(&o.Agents, 2)
	def(&o.GPUsPerAgent, 4)
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.TimeScale == 0 {
		o.TimeScale = 100
	}
	if o.RestartCost == 0 {
		o.RestartCost = 30 * time.Second
	}
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.Servers < 1 || o.Agents < 0 || o.GPUsPerAgent < 1 || !(o.TimeScale > 0) {
		return fmt.Errorf("%w: %d servers, %d agents of %d GPUs, time scale %v", ErrConfig, o.Servers, o.Agents, o.GPUsPerAgent, o.TimeScale)
	}
	return nil
}

// Start starts the servers, then the agents, and waits until a server
// reports every agent's GPUs. On error every started process is stopped.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	c = &Cluster{opts: o, client: http.Client{Timeout: 5 * time.Second}, isAgent: map[*Process]bool{}}
	defer func() {
		if err != nil {
			c.Stop(10 * time.Second)
			c = nil
		}
	}()
	ports, err := FreePorts(2*o.Servers + 1)
	if err != nil {
		return nil, err
	}
	gossip := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*o.Servers]))
	var peers []string
	for i := range o.Servers {
		peers = append(peers, fmt.Sprintf("s%d=127.0.0.1:%d=127.0.0.1:%d", i, ports[i], ports[o.Servers+i]))
	}
	for i := range o.Servers {
		name := fmt.Sprintf("s%d", i)
		args := []string{"server", "--id", name, "--data-dir", filepath.Join(o.Dir, name),
			"--raft", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--http", fmt.Sprintf("127.0.0.1:%d", ports[o.Servers+i]),
			"--peers", strings.Join(peers, ","), "--bootstrap", "--checkpoint-root", filepath.Join(o.Dir, "checkpoints"),
			"--fast-gossip", "--interval", o.Interval.String(),
			"--time-scale", strconv.FormatFloat(o.TimeScale, 'g', -1, 64), "--log-level", o.LogLevel, "--retain", o.Retain.String()}
		if i == 0 {
			args = append(args, "--gossip-port", strconv.Itoa(ports[2*o.Servers]))
		} else {
			args = append(args, "--join", gossip)
		}
		p, err := c.start(ctx, name, args)
		if err != nil {
			return nil, err
		}
		p.HTTP, p.Raft = fmt.Sprintf("127.0.0.1:%d", ports[o.Servers+i]), fmt.Sprintf("127.0.0.1:%d", ports[i])
		c.Servers = append(c.Servers, p)
	}
	for i := range o.Agents {
		name := fmt.Sprintf("a%d", i)
		args := []string{"agent", "--name", name, "--gpus", strconv.Itoa(o.GPUsPerAgent), "--rack", fmt.Sprintf("r%d", i%2),
			"--data-dir", filepath.Join(o.Dir, name),
			"--join", gossip, "--fast-gossip", "--time-scale", strconv.FormatFloat(o.TimeScale, 'g', -1, 64),
			"--restart-cost", o.RestartCost.String(), "--grace", o.Grace.String(),
			"--worker-exec", strings.Join(o.Exec, ","), "--log-level", o.LogLevel}
		p, err := c.start(ctx, name, args)
		if err != nil {
			return nil, err
		}
		c.Agents = append(c.Agents, p)
	}
	want := o.Agents * o.GPUsPerAgent
	for {
		st, err := c.Status(ctx)
		if err == nil && st.GPUs == want {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("launch: waiting for %d GPUs: %w (last: %v)", want, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AddServer starts one more server, not a member of the Raft cluster
// yet (it joins the gossip; `pollux operator raft add-server` makes it a
// voter).
func (c *Cluster) AddServer(ctx context.Context, name string) (*Process, error) {
	o := c.opts
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	raftAddr, httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	var join []string
	for _, p := range c.Live() {
		join = append(join, p.Gossip)
	}
	p, err := c.start(ctx, name, []string{"server", "--id", name, "--data-dir", filepath.Join(o.Dir, name),
		"--raft", raftAddr, "--http", httpAddr, "--join", strings.Join(join, ","), "--fast-gossip", "--interval", o.Interval.String(),
		"--time-scale", strconv.FormatFloat(o.TimeScale, 'g', -1, 64), "--log-level", o.LogLevel, "--retain", o.Retain.String()})
	if err != nil {
		return nil, err
	}
	p.HTTP, p.Raft = httpAddr, raftAddr
	c.mu.Lock()
	c.Servers = append(c.Servers, p)
	c.mu.Unlock()
	return p, nil
}

// start runs one process and waits for its ready line on stdout.
func (c *Cluster) start(ctx context.Context, name string, args []string) (*Process, error) {
	o := c.opts
	p := &Process{Name: name, Log: filepath.Join(o.Dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.Log)
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	full := append(slices.Clone(o.Exec), args...)
	p.cmd = exec.Command(full[0], full[1:]...)
	p.cmd.Env = append(os.Environ(), o.Env...)
	p.cmd.Stderr = logf
	// Its own process group: a terminal's Ctrl-C reaches the caller
	// only, which then stops every process in order.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("launch: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("launch: starting %s: %w", name, err)
	}
	c.mu.Lock()
	c.all = append(c.all, p)
	c.isAgent[p] = args[0] == "agent"
	c.mu.Unlock()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			var line struct {
				Gossip string `json:"gossip"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				p.Gossip = line.Gossip
			}
			close(ready)
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	select {
	case <-ready:
	case <-p.done:
		return nil, fmt.Errorf("launch: %s exited before it was ready (%v); see %s", name, p.err, p.Log)
	case <-ctx.Done():
		return nil, fmt.Errorf("launch: %s not ready: %w", name, ctx.Err())
	}
	return p, nil
}

// Kill sends SIGKILL to p and waits for it to exit.
func (c *Cluster) Kill(p *Process) {
	c.mu.Lock()
	p.killed = true
	c.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM to every process still running (agents first, so
// they stop their workers), waits up to timeout, then SIGKILLs the rest.
// It returns an error naming processes that had to be killed or exited
// with an error after the SIGTERM.
func (c *Cluster) Stop(timeout time.Duration) error {
	c.mu.Lock()
	var agents, servers []*Process
	for _, p := range c.all {
		if c.isAgent[p] {
			agents = append(agents, p)
		} else {
			servers = append(servers, p)
		}
	}
	c.mu.Unlock()
	var errs []error
	for _, group := range [][]*Process{agents, servers} {
		for _, p := range group {
			if p.Alive() {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		deadline := time.After(timeout)
		for _, p := range group {
			select {
			case <-p.done:
				c.mu.Lock()
				killed := p.killed
				c.mu.Unlock()
				if p.err != nil && !killed {
					errs = append(errs, fmt.Errorf("launch: %s: %w (see %s)", p.Name, p.err, p.Log))
				}
			case <-deadline:
				errs = append(errs, fmt.Errorf("launch: %s did not stop within %v: killed", p.Name, timeout))
				c.Kill(p)
			}
		}
	}
	return errors.Join(errs...)
}

// Live returns the servers still running.
func (c *Cluster) Live() []*Process {
	var out []*Process
	for _, p := range c.Servers {
		if p.Alive() {
			out = append(out, p)
		}
	}
	return out
}

// get reads one API path from the first live server that answers.
func (c *Cluster) get(ctx context.Context, path string, out any) error {
	var errs []error
	for _, p := range c.Live() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.HTTP+path, nil)
		if err != nil {
			return err
		}
		resp, err := c.client.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Errorf("%s: %s %v", p.Name, resp.Status, err))
			continue
		}
		return json.Unmarshal(body, out)
	}
	return fmt.Errorf("launch: no server answered %s: %w", path, errors.Join(errs...))
}

// Status is the cluster status from any live server.
func (c *Cluster) Status(ctx context.Context) (api.Status, error) {
	var s api.Status
	return s, c.get(ctx, api.PathStatus, &s)
}

// Jobs lists the jobs from any live server.
func (c *Cluster) Jobs(ctx context.Context) ([]api.Job, error) {
	var js []api.Job
	return js, c.get(ctx, api.PathJobs, &js)
}

// Nodes lists the nodes from any live server.
func (c *Cluster) Nodes(ctx context.Context) ([]api.Node, error) {
	var ns []api.Node
	return ns, c.get(ctx, api.PathNodes, &ns)
}

// Leader is the live server the cluster reports as leader.
func (c *Cluster) Leader(ctx context.Context) (*Process, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range c.Live() {
		if p.Name == st.Leader {
			return p, nil
		}
	}
	return nil, fmt.Errorf("launch: leader %q is not a live server", st.Leader)
}

// Submit posts a YAML job spec to the first live server that accepts it.
func (c *Cluster) Submit(ctx context.Context, spec []byte) error {
	var errs []error
	for _, p := range c.Live() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.HTTP+api.PathJobs, bytes.NewReader(spec))
		if err != nil {
			return err
		}
		resp, err := c.client.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated:
			return nil
		case resp.StatusCode < 500:
			return fmt.Errorf("launch: submit refused: %s: %s", resp.Status, bytes.TrimSpace(body))
		}
		errs = append(errs, fmt.Errorf("%s: %s", p.Name, resp.Status))
	}
	return fmt.Errorf("launch: no server took the job: %w", errors.Join(errs...))
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago (the listeners are closed before it returns, so another
// program may take one meanwhile: callers start their processes at once).
func FreePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("launch: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
