package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/remote"

	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/internal/jsonin"
	"pollux/testbed/builtin"
	"pollux/testbed/inproc"
)

// NodesCommand is the (hidden) subcommand of the pollux binary that runs
// ServeNodes: `pollux bench controlplane-nodes`.
var NodesCommand = []string{"bench", "controlplane-nodes"}

// NodeProcessNice is how much nicer than the servers' process the node
// process runs: hundreds of gossip members and emulated workers must not
// take the cores the servers' Raft timers need (a real cluster runs its
// servers on machines of their own).
const NodeProcessNice = 5

// nodesGCPercent is the node process's garbage-collection target
// (runtime/debug.SetGCPercent; Go's default is 100).
const nodesGCPercent = 400

// NodesConfig is what the servers' process sends its node process on
// stdin (one JSON object on the first line; unknown fields refused).
type NodesConfig struct {
	Names       []string      `json:"names"`
	GPUs        int           `json:"gpus"`
	ReportEvery time.Duration `json:"report_every"`
	Seeds       []string      `json:"seeds"`
	LogLevel    string        `json:"log_level"`
	// CA, Certs (node name -> certificate and key files) and GossipKey
	// are the run's TLS files; all empty with Insecure.
	Insecure  bool                 `json:"insecure"`
	CA        string               `json:"ca"`
	Certs     map[string][2]string `json:"certs"`
	GossipKey string               `json:"gossip_key"`
}

// nodeLine is one line a node process writes on stdout: a node up
// (Node, Addr), the reports its workers offered and the leases that
// lapsed so far (Offered, Lapses), the end of the start-up (Up) or why
// it failed (Err).
type nodeLine struct {
	Node    string `json:"node,omitempty"`
	Addr    string `json:"addr,omitempty"`
	Offered int64  `json:"offered,omitempty"`
	Lapses  int64  `json:"lapses,omitempty"`
	Up      bool   `json:"up,omitempty"`
	Err     string `json:"err,omitempty"`
}

// ServeNodes runs the nodes of a NodesConfig read from in, each with its
// actor system, TLS listener and gossip member, as the bench does in its
// own process; it writes their addresses, then every 500 ms the reports
// offered, on out, and stops the nodes when in ends or ctx is done.
// remoteOptions configure the actor systems' gRPC as Options.RemoteOptions.
func ServeNodes(ctx context.Context, in io.Reader, out, progress io.Writer,
	remoteOptions func(creds *pki.Credentials, log *slog.Logger) ([]remote.ConfigOption, error)) error {
	// The process stands in for hundreds of machines on a few cores;
	// memberlist allocates a 64 KiB buffer for every packet it receives,
	// so the default collector spends a third of the process's CPU
	// marking. A larger heap target trades memory for that CPU.
	debug.SetGCPercent(nodesGCPercent)
	r := bufio.NewReader(in)
	cfg, err := readNodesConfig(r)
	if err != nil {
		return err
	}
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel)) // checked by readNodesConfig
	cat, err := builtin.Catalog()
	if err != nil {
		return err
	}
	b := &bench{o: Options{GPUs: cfg.GPUs, ReportEvery: cfg.ReportEvery, Insecure: cfg.Insecure, RemoteOptions: remoteOptions, LogLevel: cfg.LogLevel},
		cat:   cat,
		log:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelInfo})),
		quiet: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: lvl})),
		lib:   slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: max(lvl, slog.LevelError+1)}))}
	if !cfg.Insecure {
		b.creds = func(name string) (*pki.Credentials, error) {
			f, ok := cfg.Certs[name]
			if !ok {
				return nil, fmt.Errorf("%w: no certificate for %s", ErrConfig, name)
			}
			return pki.LoadCredentials(cfg.CA, f[0], f[1])
		}
		if b.gossipKeys, err = cluster.ReadKeyFile(cfg.GossipKey); err != nil {
			return err
		}
	}
	b.launcher = &inproc.Launcher{Catalog: cat, TimeScale: 1, Tick: cfg.ReportEvery, ReportEvery: cfg.ReportEvery, AllRanks: true, Logger: b.quiet}
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	write := func(l nodeLine) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(l)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The servers' process closes stdin to stop the nodes (or dies).
		_, _ = io.Copy(io.Discard, r)
		cancel()
	}()
	defer b.stop()
	if err := b.startNodes(ctx, cfg.Names, cfg.Seeds); err != nil {
		write(nodeLine{Err: err.Error()})
		return err
	}
	for _, h := range b.nodes {
		write(nodeLine{Node: h.name, Addr: h.addr})
	}
	write(nodeLine{Up: true})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
			write(nodeLine{Offered: b.offered.Load(), Lapses: b.lapses.Load()})
		}
	}
}

// readNodesConfig reads a node process's configuration: the first line
// of r; the rest of the input is only watched for its end.
func readNodesConfig(r *bufio.Reader) (NodesConfig, error) {
	var cfg NodesConfig
	line, err := r.ReadBytes('\n')
	if err != nil && (!errors.Is(err, io.EOF) || len(line) == 0) {
		return cfg, fmt.Errorf("%w: node process configuration: %w", ErrConfig, err)
	}
	if err := jsonin.Decode(line, &cfg); err != nil {
		return cfg, fmt.Errorf("%w: node process configuration: %w", ErrConfig, err)
	}
	var lvl slog.Level
	switch {
	case lvl.UnmarshalText([]byte(cfg.LogLevel)) != nil:
		return cfg, fmt.Errorf("%w: log level %q", ErrConfig, cfg.LogLevel)
	case len(cfg.Names) > 4096 || (len(cfg.Names) > 0 && (cfg.GPUs < 1 || cfg.ReportEvery <= 0)):
		return cfg, fmt.Errorf("%w: %d nodes of %d GPUs reporting every %v", ErrConfig, len(cfg.Names), cfg.GPUs, cfg.ReportEvery)
	}
	return cfg, nil
}

// nodeProcess is the node process as the servers' process sees it.
type nodeProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error // the process's exit
}

// startNodeProcess starts the nodes in a process of their own (the
// pollux binary exe, NodeProcessNice nicer) and waits until they are up;
// the reports their workers offer are added to b.remoteOffered as they
// come.
func (b *bench) startNodeProcess(ctx context.Context, names, seeds []string) error {
	cfg := NodesConfig{Names: names, GPUs: b.o.GPUs, ReportEvery: b.o.ReportEvery, Seeds: seeds, LogLevel: b.o.LogLevel, Insecure: b.tls == nil}
	if b.tls != nil {
		cfg.CA, cfg.GossipKey, cfg.Certs = b.tls.CA, b.tls.GossipKey, map[string][2]string{}
		for _, n := range names {
			cert, key, err := b.tls.Files(n)
			if err != nil {
				return err
			}
			cfg.Certs[n] = [2]string{cert, key}
		}
	}
	args := append([]string{b.o.Executable}, NodesCommand...)
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", strconv.Itoa(NodeProcessNice)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = b.progress
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("controlplane: starting the node process: %w", err)
	}
	p := &nodeProcess{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	b.nodeProc = p
	if err := json.NewEncoder(stdin).Encode(cfg); err != nil {
		return fmt.Errorf("controlplane: configuring the node process: %w", err)
	}
	lines := make(chan nodeLine)
	// Whatever ends the start-up, the lines left are drained, so that
	// the process's exit is seen.
	defer func() {
		go func() {
			for range lines {
			}
		}()
	}()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l nodeLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			if l.Offered > 0 || l.Lapses > 0 {
				b.remoteOffered.Store(l.Offered)
				b.remoteLapses.Store(l.Lapses)
				continue
			}
			lines <- l
		}
		close(lines)
		p.done <- cmd.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, ok := <-lines:
			switch {
			case !ok:
				return errors.New("controlplane: the node process ended before its nodes were up")
			case l.Err != "":
				return fmt.Errorf("controlplane: node process: %s", l.Err)
			case l.Up:
				return nil
			case l.Node != "":
				b.nodes = append(b.nodes, &nodeHost{name: l.Node, addr: l.Addr})
			}
		}
	}
}

// stopNodeProcess stops the node process: its stdin closed, it stops
// its nodes; killed if it has not ended within a minute.
func (b *bench) stopNodeProcess() {
	p := b.nodeProc
	if p == nil {
		return
	}
	b.nodeProc = nil
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// offeredNow is the reports the workers offered so far, in both
// processes.
func (b *bench) offeredNow() int64 { return b.offered.Load() + b.remoteOffered.Load() }

// lapsesNow is the leases lapsed so far, in both processes.
func (b *bench) lapsesNow() int64 { return b.lapses.Load() + b.remoteLapses.Load() }
