package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"pollux/cluster/pki"
	"pollux/cluster/provider"
	"pollux/internal/cpuset"
	"pollux/testbed/chaos/history"
	"pollux/testbed/chaos/mono"
	"pollux/testbed/chaos/netns"
	"pollux/testbed/chaos/proc"
	"pollux/testbed/chaos/record"
)

// Ports every member listens on in its own namespace.
const (
	nsRaft   = 7000
	nsHTTP   = 8080
	nsGossip = 7946
	nsActor  = 8090
)

// Member is one server or agent: its fixed command line, and the process
// of its current incarnation.
type Member struct {
	Role history.Role
	ID   string
	// HTTP is a server's API address; Raft, Gossip and Actor its other
	// listeners (agents have Gossip and Actor).
	HTTP, Raft, Gossip, Actor string
	// Log is the file its stderr goes to.
	Log string
	// DataDir is a server's data directory, or an agent's (its fencing
	// state).
	DataDir string
	// Rack is the rack the member declares ("" for a server without
	// Options.ServerRacks).
	Rack string
	// CPUs are the cores an agent's CPU slots share (its --cpus; nil:
	// all the launcher's, see AgentCores).
	CPUs []int
	// TempDir is the member's TMPDIR (Dir/tmp/<id>, 0700), kept across
	// its incarnations: what a killed one leaves there (an agent's
	// pollux-agent-* directories, its workers' report tokens among them)
	// goes with the run's directory instead of piling up in /tmp.
	TempDir string

	args   []string // after the command
	prefix []string // before it (a namespace)
	env    []string

	mu      sync.Mutex
	p       *proc.Proc
	inc     uint64
	reports string        // an agent's report listener, from its ready line
	exit    chan struct{} // closed once the current incarnation's exit is recorded
	paused  bool
}

// Reports is an agent's report listener (its workers report there), as
// its current incarnation's ready line said.
func (m *Member) Reports() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reports
}

// SetFlag sets a flag of m's command line to value, for its next start
// (an agent restarted with another --gpu-type or --topology, say): the
// flag's value is replaced, or the flag appended. Call it while m is not
// being started.
func (m *Member) SetFlag(name, value string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.Index(m.args, name); i >= 0 && i+1 < len(m.args) {
		m.args[i+1] = value
		return
	}
	m.args = append(m.args, name, value)
}

// Running reports whether the member's process runs (paused or not).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p != nil && !m.p.Exited()
}

// Serving reports whether it runs and is not paused.
func (m *Member) Serving() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.p != nil && !m.p.Exited() && !m.paused
}

// PID is the current process's id (0 if none runs).
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p == nil || m.p.Exited() {
		return 0
	}
	return m.p.PID()
}

// Cluster is a started cluster.
type Cluster struct {
	o       Options
	Servers []*Member
	Agents  []*Member
	log     *slog.Logger
	group   *proc.Group
	net     *netns.Net
	hist    *history.Recorder
	watch   *watcher
	tls     *pki.Bundle
	http    *http.Client
	// token is the cluster's bootstrap (admin) token secret, also in
	// tokenFile (0600).
	token     string
	tokenFile string
	mounts    []string
	clients   atomic.Int64

	closeOnce sync.Once
	closeErr  error
}

// Start lays out and starts a cluster, and waits until a leader reports
// every agent's GPUs. On error everything started is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	c := &Cluster{o: o, log: o.Logger, group: proc.NewGroup()}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// start does Start's work on c.
func (c *Cluster) start(ctx context.Context) (err error) {
	o := c.o
	if o.Observe {
		if c.hist, err = history.Create(filepath.Join(o.Dir, "history.jsonl")); err != nil {
			return err
		}
		if _, err := c.hist.Event(history.Event{Kind: history.RunBegin, Scenario: o.Scenario, Seed: o.Seed, Planned: o.Planned}); err != nil {
			return err
		}
	}
	if err := c.layout(ctx); err != nil {
		return err
	}
	clientTLS, err := c.tls.ClientTLS()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
		TLSClientConfig: clientTLS, TLSHandshakeTimeout: 10 * time.Second}
	if c.net != nil {
		transport.DialContext = c.net.Dial
	}
	c.http = &http.Client{Transport: &tokenTransport{base: transport, token: c.token}}
	if o.Observe {
		c.watch = newWatcher(filepath.Join(o.Dir, "records"), c.hist, c.group, c.log)
	}
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		if err := c.Start(ctx, m, "", 0); err != nil {
			return err
		}
	}
	if err := c.bootstrapACL(ctx, 60*time.Second); err != nil {
		return err
	}
	return c.WaitGPUs(ctx, o.Agents*o.GPUsPerAgent, 60*time.Second)
}

// layout makes the network, the directories and the command lines.
func (c *Cluster) layout(ctx context.Context) error {
	o := c.o
	var addrs [][]string // per member: raft/gossip/... host:port, in order servers then agents
	var prefixes [][]string
	var binds []string
	switch o.Network {
	case Namespaces:
		if gone, err := netns.Sweep(); err != nil {
			c.log.Warn("launch: sweeping stale namespaces", "err", err)
		} else if len(gone) > 0 {
			c.log.Info("launch: removed namespaces of dead runs", "namespaces", gone)
		}
		var ms []netns.Member
		for i := range o.Servers {
			ms = append(ms, netns.Member{Name: fmt.Sprintf("s%d", i), Labels: map[string]string{"role": "server"}})
		}
		for i := range o.Agents {
			ms = append(ms, netns.Member{Name: fmt.Sprintf("a%d", i), Labels: map[string]string{"role": "agent", "rack": Rack(i, o.Racks)}})
		}
		n, err := netns.New(ctx, ms)
		if err != nil {
			return err
		}
		c.net = n
		for _, m := range ms {
			ip, _ := n.IP(m.Name)
			pre, _ := n.Exec(m.Name)
			h := ip.String()
			addrs = append(addrs, []string{join(h, nsRaft), join(h, nsHTTP), join(h, nsGossip), join(h, nsActor)})
			prefixes = append(prefixes, pre)
			binds = append(binds, h)
		}
	default:
		ports, err := FreePorts(4*o.Servers + 2*o.Agents)
		if err != nil {
			return err
		}
		for i := range o.Servers {
			p := ports[4*i:]
			addrs = append(addrs, []string{join("127.0.0.1", p[0]), join("127.0.0.1", p[1]), join("127.0.0.1", p[2]), join("127.0.0.1", p[3])})
		}
		for i := range o.Agents {
			p := ports[4*o.Servers+2*i:]
			addrs = append(addrs, []string{"", "", join("127.0.0.1", p[0]), join("127.0.0.1", p[1])})
		}
		prefixes = make([][]string, o.Servers+o.Agents)
		binds = slices.Repeat([]string{"127.0.0.1"}, o.Servers+o.Agents)
	}
	// Every process runs with mutual TLS and encrypted gossip: a CA, a
	// certificate per process (naming the address it is reached at) and a
	// gossip key, made for this run.
	var servers, agents []string
	hosts := map[string][]string{}
	for i := range o.Servers + o.Agents {
		id := fmt.Sprintf("s%d", i)
		if i >= o.Servers {
			id = fmt.Sprintf("a%d", i-o.Servers)
			agents = append(agents, id)
		} else {
			servers = append(servers, id)
		}
		if o.Network == Namespaces {
			hosts[id] = []string{binds[i]}
		}
	}
	var err error
	switch {
	case o.Bundle != nil && o.Network == Namespaces:
		return fmt.Errorf("%w: a bundle made beforehand is for loopback clusters", ErrCluster)
	case o.Bundle != nil:
		c.tls = o.Bundle
	default:
		if c.tls, err = pki.DevBundleHosts(filepath.Join(o.Dir, "tls"), servers, agents, hosts); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
	}
	if err := c.makeToken(); err != nil {
		return err
	}
	var peers, gossip, agentGossip []string
	for i := range o.Servers {
		peers = append(peers, fmt.Sprintf("s%d=%s=%s", i, addrs[i][0], addrs[i][1]))
		gossip = append(gossip, addrs[i][2])
	}
	for i := range o.Agents {
		agentGossip = append(agentGossip, addrs[o.Servers+i][2])
	}
	ts := strconv.FormatFloat(o.TimeScale, 'g', -1, 64)
	ckpt := filepath.Join(o.Dir, "checkpoints")
	if o.CheckpointRoot != "" {
		ckpt = o.CheckpointRoot
	}
	gpuFlag := "--gpus"
	var cores [][]int
	if o.CPUSlots > 0 {
		gpuFlag = "--cpu-slots"
		if cores, err = AgentCores(o.Agents, o.CPUSlots); err != nil {
			return err
		}
	}
	for i := range o.Servers {
		id := fmt.Sprintf("s%d", i)
		a := addrs[i]
		data := filepath.Join(o.Dir, id)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		if o.DataSize > 0 {
			if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size="+strconv.FormatInt(o.DataSize, 10)); err != nil {
				return fmt.Errorf("%w: mounting a tmpfs of %d bytes on %s: %w", ErrCluster, o.DataSize, data, err)
			}
			c.mounts = append(c.mounts, data)
		}
		tmp, err := c.tempDir(id)
		if err != nil {
			return err
		}
		// Every other member is a gossip seed: after a cold restart the
		// servers find the agents again through it.
		join := append(slices.Delete(slices.Clone(gossip), i, i+1), agentGossip...)
		_, gport, _ := net.SplitHostPort(a[2])
		_, aport, _ := net.SplitHostPort(a[3])
		c.Servers = append(c.Servers, &Member{Role: history.Server, ID: id, HTTP: a[1], Raft: a[0], Gossip: a[2], Actor: a[3],
			Log: filepath.Join(o.Dir, id+".log"), DataDir: data, TempDir: tmp, prefix: prefixes[i],
			args: []string{"server", "--id", id, "--data-dir", data, "--bind", binds[i],
				"--raft", a[0], "--http", a[1], "--gossip-port", gport, "--actor-port", aport,
				"--peers", strings.Join(peers, ","), "--bootstrap", "--fast-gossip", "--interval", o.Interval.String(),
				"--time-scale", ts, "--checkpoint-root", ckpt, "--retain", o.Retain.String(), "--log-level", o.LogLevel,
				"--join", strings.Join(join, ",")}})
		if o.ServerRacks {
			c.Servers[i].Rack = Rack(i, o.Racks)
			c.Servers[i].args = append(c.Servers[i].args, "--topology", "rack="+c.Servers[i].Rack)
		}
		if o.Policy != "" {
			c.Servers[i].args = append(c.Servers[i].args, "--policy", o.Policy)
		}
		if as := o.Autoscale; as != nil {
			c.Servers[i].args = append(c.Servers[i].args, "--autoscale", "local", "--autoscale-dir", c.AutoscaleDir(),
				"--ca-key", filepath.Join(c.tls.Dir, pki.CAKeyFile), "--node-gpus", strconv.Itoa(o.GPUsPerAgent),
				"--min-nodes", strconv.Itoa(as.MinNodes), "--max-nodes", strconv.Itoa(as.MaxNodes),
				"--boot-delay", as.BootDelay.String(), "--node-cost", strconv.FormatFloat(as.NodeCost, 'g', -1, 64),
				"--scale-down-delay", as.ScaleDownDelay.String(),
				// The agents the servers add run like the launcher's own.
				"--autoscale-agent-arg=--restart-cost="+o.RestartCost.String(), "--autoscale-agent-arg=--grace="+o.Grace.String(),
				"--autoscale-exec", strings.Join(o.Exec, ","),
				"--autoscale-agent-arg=--worker-exec="+strings.Join(o.Exec, ","), "--autoscale-agent-arg=--log-level="+o.LogLevel)
			for _, name := range envNames(o.Env) {
				c.Servers[i].args = append(c.Servers[i].args, "--autoscale-agent-arg=--pass-env="+name)
			}
			if workersAsRoot(o.AgentArgs) {
				c.Servers[i].args = append(c.Servers[i].args, "--autoscale-agent-arg=--run-as=root")
			}
			if as.JoinTimeout > 0 {
				c.Servers[i].args = append(c.Servers[i].args, "--join-timeout", as.JoinTimeout.String())
			}
			if as.GPUType != "" {
				c.Servers[i].args = append(c.Servers[i].args, "--node-gpu-type", as.GPUType)
			}
		}
		c.Servers[i].args = append(append(c.Servers[i].args, c.tls.Flags(id)...), o.ServerArgs...)
	}
	for i := range o.Agents {
		id := fmt.Sprintf("a%d", i)
		a := addrs[o.Servers+i]
		_, gport, _ := net.SplitHostPort(a[2])
		_, aport, _ := net.SplitHostPort(a[3])
		tmp, err := c.tempDir(id)
		if err != nil {
			return err
		}
		// The agent's fencing state (the incarnations it ran) survives
		// its restarts in its data directory.
		m := &Member{Role: history.Agent, ID: id, Gossip: a[2], Actor: a[3], Log: filepath.Join(o.Dir, id+".log"), prefix: prefixes[o.Servers+i],
			DataDir: filepath.Join(o.Dir, id), TempDir: tmp, Rack: Rack(i, o.Racks),
			args: []string{"agent", "--name", id, "--bind", binds[o.Servers+i], gpuFlag, strconv.Itoa(o.GPUsPerAgent),
				"--data-dir", filepath.Join(o.Dir, id),
				"--topology", "rack=" + Rack(i, o.Racks), "--gossip-port", gport, "--actor-port", aport, "--join", strings.Join(gossip, ","),
				"--fast-gossip", "--time-scale", ts, "--restart-cost", o.RestartCost.String(), "--grace", o.Grace.String(),
				"--worker-exec", strings.Join(o.Exec, ","), "--log-level", o.LogLevel}}
		if len(o.GPUTypes) > 0 {
			m.args = append(m.args, "--gpu-type", o.GPUTypes[i%len(o.GPUTypes)])
		}
		if cores != nil {
			m.CPUs = cores[i]
			m.args = append(m.args, "--cpus", cpuset.Format(cores[i]))
		}
		m.args = append(append(m.args, c.tls.Flags(id)...), o.AgentArgs...)
		if workersAsRoot(o.AgentArgs) {
			m.args = append(m.args, "--run-as", "root")
		}
		// Workers get a clean environment: what they need is passed on.
		for _, name := range append(envNames(o.Env), record.EnvDir) {
			m.args = append(m.args, "--pass-env", name)
		}
		if o.Observe {
			dir := filepath.Join(o.Dir, "records", id)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("launch: %w", err)
			}
			m.env = []string{record.EnvDir + "=" + dir}
		}
		c.Agents = append(c.Agents, m)
	}
	return nil
}

// tempDir makes member id's TMPDIR, Dir/tmp/<id> (0700). A member's
// temporary files are removed only by its clean shutdown; a member
// killed with SIGKILL (as tests and pollux chaos do) leaves them
// behind, an agent's workers' report tokens among them. Beside its data
// directory rather than in it: a test may wipe that, a tmpfs may bound
// it (DataSize), and it holds private files only (0700 and 0600, as
// pollux chaos's local-user attack checks), which an agent's
// pollux-agent-ca-* directory (0755, for its workers' users) is not.
func (c *Cluster) tempDir(id string) (string, error) {
	dir := filepath.Join(c.o.Dir, "tmp", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("launch: %w", err)
	}
	return dir, nil
}

// AgentCores shares the cores this process may use among agents of
// slots CPU slots each on this machine: agent i gets the i-th of agents
// contiguous, as even as possible runs, so that no two slots share a
// core. Nil when there are fewer cores than slots in all: each agent
// then gets all of them (slot i of every agent on the same cores, as
// `pollux agent --cpu-slots` splits them), rather than slots of one
// agent sharing a core.
func AgentCores(agents, slots int) ([][]int, error) {
	cpus, err := cpuset.Allowed()
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	if agents < 1 || slots < 1 || len(cpus) < agents*slots {
		return nil, nil
	}
	return cpuset.Split(cpus, agents), nil
}

// envNames are the names of KEY=VALUE variables.
func envNames(env []string) []string {
	names := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return names
}

func join(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// Rack is the rack of the i-th server or agent of a cluster of racks
// racks: r<i mod racks>.
func Rack(i, racks int) string { return fmt.Sprintf("r%d", i%max(racks, 1)) }

// AddServer starts one more server, id, on loopback: a certificate of
// the run's CA is issued for it, it joins the gossip of every member,
// and it is not in the Raft configuration (`pollux operator raft
// add-server` makes it a voter); the cluster's checkpoint root comes
// from the replicated state. It is appended to Servers: call it from the
// goroutine that drives the cluster, not while another reads Servers.
// Networks of namespaces are laid out at Start and take no new member.
func (c *Cluster) AddServer(ctx context.Context, id string) (*Member, error) {
	o := c.o
	if o.Network != Loopback {
		return nil, fmt.Errorf("%w: AddServer on a %s network (loopback only)", ErrConfig, o.Network)
	}
	if c.Member(id) != nil {
		return nil, fmt.Errorf("%w: %q is already a member", ErrConfig, id)
	}
	if err := c.tls.Add(pki.RoleServer, id, nil); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	ports, err := FreePorts(4)
	if err != nil {
		return nil, err
	}
	var seeds []string
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		seeds = append(seeds, m.Gossip)
	}
	data := filepath.Join(o.Dir, id)
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	tmp, err := c.tempDir(id)
	if err != nil {
		return nil, err
	}
	a := []string{join("127.0.0.1", ports[0]), join("127.0.0.1", ports[1]), join("127.0.0.1", ports[2]), join("127.0.0.1", ports[3])}
	m := &Member{Role: history.Server, ID: id, HTTP: a[1], Raft: a[0], Gossip: a[2], Actor: a[3],
		Log: filepath.Join(o.Dir, id+".log"), DataDir: data, TempDir: tmp,
		args: []string{"server", "--id", id, "--data-dir", data, "--bind", "127.0.0.1",
			"--raft", a[0], "--http", a[1], "--gossip-port", strconv.Itoa(ports[2]), "--actor-port", strconv.Itoa(ports[3]),
			"--fast-gossip", "--interval", o.Interval.String(), "--time-scale", strconv.FormatFloat(o.TimeScale, 'g', -1, 64),
			"--retain", o.Retain.String(), "--log-level", o.LogLevel, "--join", strings.Join(seeds, ",")}}
	m.args = append(m.args, c.tls.Flags(id)...)
	c.Servers = append(c.Servers, m)
	if err := c.Start(ctx, m, "", 0); err != nil {
		return nil, err
	}
	return m, nil
}

// TLS is the cluster's CA, certificates and gossip key (in Dir/tls).
func (c *Cluster) TLS() *pki.Bundle { return c.tls }

// HTTPClient is an HTTPS client of the cluster's API, reaching the
// servers where the launcher does (from the switch namespace in
// Namespaces), with an overall timeout per request. It sends the admin
// token with every request that carries no Authorization header of its
// own. Its requests are not recorded in the history (use Client for
// that).
func (c *Cluster) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: c.http.Transport, Timeout: timeout}
}

// Net is the cluster's network (nil on loopback).
func (c *Cluster) Net() *netns.Net { return c.net }

// History is the client-side history (nil without Observe).
func (c *Cluster) History() *history.Recorder { return c.hist }

// Options are the options the cluster runs with (defaults filled in).
func (c *Cluster) Options() Options { return c.o }

// Member returns the server or agent with id.
func (c *Cluster) Member(id string) *Member {
	for _, m := range append(slices.Clone(c.Servers), c.Agents...) {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// readyWriter closes ready at the first newline written to it, keeping
// the line (the ready line, up to 64 KiB).
type readyWriter struct {
	once  sync.Once
	ready chan struct{}
	line  []byte // until ready
}

func (w *readyWriter) Write(b []byte) (int, error) {
	select {
	case <-w.ready:
		return len(b), nil
	default:
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		w.line = append(w.line, b[:i]...)
		w.once.Do(func() { close(w.ready) })
	} else if len(w.line) < 1<<16 {
		w.line = append(w.line, b...)
	}
	return len(b), nil
}

// event records a harness event (when observing); a failure sticks in
// the recorder and fails the run.
func (c *Cluster) event(e history.Event) {
	if c.hist == nil {
		return
	}
	if _, err := c.hist.Event(e); err != nil {
		c.log.Error("launch: history", "err", err)
	}
}

// Start starts m's next incarnation and waits for its ready line. fault
// and seq mark a restart that is part of a fault.
func (c *Cluster) Start(ctx context.Context, m *Member, fault string, seq int) error {
	logf, err := os.OpenFile(m.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	rw := &readyWriter{ready: make(chan struct{})}
	m.mu.Lock()
	if m.p != nil && !m.p.Exited() {
		m.mu.Unlock()
		logf.Close()
		return fmt.Errorf("%w: %s/%s is already running", ErrCluster, m.Role, m.ID)
	}
	args := m.args
	if c.o.ConfigFiles {
		if args, err = c.configArgs(m); err != nil {
			m.mu.Unlock()
			logf.Close()
			return err
		}
	}
	full := append(append(slices.Clone(m.prefix), c.o.Exec...), args...)
	// TMPDIR first, as the last of equal names wins: a TMPDIR in
	// Options.Env is the caller's to choose.
	var env []string
	if m.TempDir != "" {
		env = []string{"TMPDIR=" + m.TempDir}
	}
	env = append(append(env, c.o.Env...), m.env...)
	p, err := c.group.Start(proc.Spec{Name: string(m.Role) + "/" + m.ID, Path: full[0], Args: full[1:],
		Env: env, Stdout: rw, Stderr: logf})
	if err != nil {
		m.mu.Unlock()
		logf.Close()
		return err
	}
	m.inc++
	inc := m.inc
	m.p, m.paused = p, false
	exit := make(chan struct{})
	m.exit = exit
	m.mu.Unlock()
	c.event(history.Event{Kind: history.ProcStart, Role: m.Role, ID: m.ID, PID: p.PID(), Inc: inc, Fault: fault, Seq: seq})
	go func() {
		<-p.Done()
		st, _ := p.Wait(time.Second)
		e := history.Event{Kind: history.ProcExit, Role: m.Role, ID: m.ID, PID: p.PID(), Inc: inc}
		if st != nil {
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				e.Sig = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
			} else {
				e.Exit = st.ExitCode()
			}
		}
		c.event(e)
		logf.Close()
		close(exit)
	}()
	select {
	case <-rw.ready:
		var ready struct {
			Reports string `json:"reports"`
		}
		if m.Role == history.Agent && json.Unmarshal(rw.line, &ready) == nil {
			m.mu.Lock()
			m.reports = ready.Reports
			m.mu.Unlock()
		}
		return nil
	case <-p.Done():
		return fmt.Errorf("%w: %s/%s exited before it was ready; see %s%s", ErrCluster, m.Role, m.ID, m.Log, logTail(m.Log))
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%w: %s/%s not ready after 60s; see %s", ErrCluster, m.Role, m.ID, m.Log)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Signal records sig and sends it to m's process group; SIGSTOP marks it
// paused, SIGCONT resumed.
func (c *Cluster) Signal(m *Member, sig syscall.Signal, fault string, seq int) error {
	m.mu.Lock()
	p, inc := m.p, m.inc
	m.mu.Unlock()
	if p == nil || p.Exited() {
		return fmt.Errorf("%w: %w: %s/%s", ErrCluster, ErrNotRunning, m.Role, m.ID)
	}
	c.event(history.Event{Kind: history.Signal, Role: m.Role, ID: m.ID, PID: p.PID(), Inc: inc,
		Sig: strings.TrimPrefix(unix.SignalName(sig), "SIG"), Fault: fault, Seq: seq})
	err := p.Signal(sig)
	m.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		m.paused = true
	case syscall.SIGCONT:
		m.paused = false
	}
	m.mu.Unlock()
	return err
}

// Kill is kill -9 of m; it returns once the exit is recorded.
func (c *Cluster) Kill(m *Member, fault string, seq int) error {
	if err := c.Signal(m, syscall.SIGKILL, fault, seq); err != nil {
		return err
	}
	return c.waitExit(m, 10*time.Second)
}

// KillAll is kill -9 of every member of ms at once (the signals first,
// then the waits): a rack losing its power. It returns once every exit
// is recorded.
func (c *Cluster) KillAll(ms []*Member, fault string, seq int) error {
	var errs []error
	for _, m := range ms {
		errs = append(errs, c.Signal(m, syscall.SIGKILL, fault, seq))
	}
	for _, m := range ms {
		errs = append(errs, c.waitExit(m, 10*time.Second))
	}
	return errors.Join(errs...)
}

// waitExit waits until m's current incarnation has exited and its exit
// is recorded.
func (c *Cluster) waitExit(m *Member, timeout time.Duration) error {
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
		return fmt.Errorf("%w: %s/%s still running %s after the signal", ErrCluster, m.Role, m.ID, timeout)
	}
}

// Workers returns the workers the records show running now (observing
// only), in a stable order.
func (c *Cluster) Workers() []Worker {
	if c.watch == nil {
		return nil
	}
	return c.watch.running()
}

// WorkerAlive reports whether worker w's process still runs (the same
// process: its start time matches, so a reused PID is not it).
func WorkerAlive(w Worker) bool { return mono.Alive(w.PID, w.Boot) }

// KillWorker kills worker w's process group, recording the signal. It
// returns ErrNotRunning, and records nothing, if the worker had already
// exited: a kill counts only if the process was alive.
func (c *Cluster) KillWorker(w Worker, fault string, seq int) error {
	if !WorkerAlive(w) {
		return fmt.Errorf("%w: worker %s rank %d (pid %d) on %s", ErrNotRunning, w.Job, w.Rank, w.PID, w.Node)
	}
	c.event(history.Event{Kind: history.Signal, Role: history.Worker, ID: w.Job, Node: w.Node, PID: w.PID, Inc: w.Inc,
		Rank: w.Rank, Sig: "KILL", Fault: fault, Seq: seq})
	if err := syscall.Kill(-w.PID, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("%w: worker %s rank %d (pid %d) on %s exited as it was killed", ErrNotRunning, w.Job, w.Rank, w.PID, w.Node)
		}
		return fmt.Errorf("launch: killing worker pid %d: %w", w.PID, err)
	}
	return nil
}

// AutoscaleDir is where the servers' local provider keeps the agents it
// starts (with Options.Autoscale).
func (c *Cluster) AutoscaleDir() string { return filepath.Join(c.o.Dir, "autoscale") }

// Stop ends the run in order: SIGTERM to the agents (those the servers
// added with Options.Autoscale first: they stop their workers), then to
// the servers, SIGKILL to whatever outlives its grace; then it waits
// until every worker it saw is gone, closes the history with run_end,
// and removes the network and mounts. Call it once, after every
// operation of the run has completed.
func (c *Cluster) Stop() error {
	var errs []error
	errs = append(errs, c.stopAutoscaled())
	for _, group := range [][]*Member{c.Agents, c.Servers} {
		for _, m := range group {
			if m.Running() {
				_ = c.Signal(m, syscall.SIGCONT, "", 0) // never leave one paused
				_ = c.Signal(m, syscall.SIGTERM, "", 0)
			}
		}
		for _, m := range group {
			if err := c.waitExit(m, c.o.Grace+15*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s/%s still running %s after SIGTERM: killed", ErrSlowStop, m.Role, m.ID, c.o.Grace+15*time.Second))
				_ = c.Signal(m, syscall.SIGKILL, "", 0)
				_ = c.waitExit(m, 5*time.Second)
			}
		}
	}
	// An agent a server started while the others stopped.
	errs = append(errs, c.stopAutoscaled())
	if c.watch != nil {
		errs = append(errs, c.watch.finish(5*time.Second))
	}
	if c.hist != nil {
		c.event(history.Event{Kind: history.RunEnd})
		errs = append(errs, c.hist.Err())
	}
	errs = append(errs, c.Close())
	return errors.Join(errs...)
}

// Close kills everything at once and removes the network and mounts (on
// error or interruption; Stop calls it last). A history closed this way
// has no run_end. It is idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		var errs []error
		errs = append(errs, c.stopAutoscaled())
		if c.watch != nil {
			c.watch.stop()
		}
		errs = append(errs, c.group.Close())
		if c.hist != nil {
			errs = append(errs, c.hist.Close())
		}
		if c.net != nil {
			errs = append(errs, c.net.Close())
		}
		for _, dir := range c.mounts {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("launch: unmounting %s: %w", dir, err))
			}
		}
		if c.http != nil {
			c.http.CloseIdleConnections()
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// stopAutoscaled stops the agents the servers added (SIGTERM, SIGKILL
// after the grace).
func (c *Cluster) stopAutoscaled() error {
	if c.o.Autoscale == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*(c.o.Grace+15*time.Second))
	defer cancel()
	return provider.StopAll(ctx, c.AutoscaleDir(), c.o.Grace+15*time.Second, c.log)
}

// tailBytes bounds what logTail quotes of a log.
const tailBytes = 2048

// logTail is the end of a member's log (its last whole lines, at most
// tailBytes), for an error that says why the member stopped: a test run
// removes the log with its directory. "" when the log is empty or cannot
// be read.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if b = bytes.TrimSpace(b); err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return "; its log ends with:\n" + string(b)
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago (the listeners are closed before it returns, so another
// program may take one meanwhile: callers start their processes at once;
// ReservePorts holds them longer).
func FreePorts(n int) ([]int, error) {
	r, err := ReservePorts(n)
	if err != nil {
		return nil, err
	}
	r.Close()
	return r.Ports, nil
}

// Reserved are TCP ports on 127.0.0.1 held open by listeners until each
// is released to the process that will listen on it: meanwhile no other
// caller of FreePorts or ReservePorts, and no outgoing connection, is
// given one of them.
type Reserved struct {
	Ports []int
	lns   []net.Listener
}

// ReservePorts reserves n distinct ports.
func ReservePorts(n int) (*Reserved, error) {
	r := &Reserved{}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("launch: free port: %w", err)
		}
		r.lns = append(r.lns, ln)
		r.Ports = append(r.Ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return r, nil
}

// Release frees port i, just before its process starts.
func (r *Reserved) Release(i int) {
	if r.lns[i] != nil {
		r.lns[i].Close()
		r.lns[i] = nil
	}
}

// Close frees every port still held.
func (r *Reserved) Close() {
	for i := range r.lns {
		r.Release(i)
	}
}

// workersAsRoot says whether agents started with args (by the launcher,
// or by the servers' autoscaler) must be told --run-as root: the
// launcher runs as root and args choose no user. Their workers run the
// test binary, which sits in a directory the uid range cannot enter.
func workersAsRoot(args []string) bool {
	return os.Geteuid() == 0 && !slices.ContainsFunc(args, func(a string) bool {
		return a == "--run-as" || a == "--run-as-range" || strings.HasPrefix(a, "--run-as=") || strings.HasPrefix(a, "--run-as-range=")
	})
}
