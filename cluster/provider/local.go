package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pollux/cluster/pki"
)

// Local starts and stops `pollux agent` processes on this machine. Every
// machine has a directory Dir/<name> holding its certificate (issued by
// the cluster CA for an agent of that name), its fencing state, its log
// (agent.log) and its process id (pid): any server's Local with the same
// Dir finds the agents another one started, so Add and Remove are
// idempotent across a failover. Agents run in process groups of their
// own and outlive the server that started them (a server restarting
// must not stop its cluster's machines); Remove, or StopAll, stops them.
type Local struct {
	// Dir holds the machines' directories. Required.
	Dir string
	// Exec is the program (and leading arguments) that runs `pollux`.
	// Required.
	Exec []string
	// GPUs of every machine (the node template). Required.
	GPUs int
	// GPUType, if set, is every machine's GPU type (the template's):
	// agents start with --gpu-type GPUType.
	GPUType string
	// Join are gossip addresses of cluster members. Required.
	Join []string
	// CACert and CAKey are the cluster CA that certifies the agents, and
	// GossipKey the gossip key file; required unless Insecure.
	CACert, CAKey, GossipKey string
	// Insecure starts agents with --insecure (no TLS); it must be asked
	// for explicitly, as for every process.
	Insecure bool
	// Args are added to every agent's command line (--fast-gossip,
	// --time-scale, --pass-env, ...), and Env to its environment.
	Args []string
	Env  []string
	// BootDelay is how long Add waits before it starts the agent: a
	// cloud machine's boot.
	BootDelay time.Duration
	// ReadyTimeout bounds the wait for an agent's ready line (default
	// 60 s); StopTimeout for its exit after SIGTERM before SIGKILL
	// (default 30 s).
	ReadyTimeout, StopTimeout time.Duration
	Logger                    *slog.Logger
}

// NewLocal checks and completes l.
func NewLocal(l Local) (*Local, error) {
	switch {
	case l.Dir == "" || len(l.Exec) == 0 || len(l.Join) == 0:
		return nil, fmt.Errorf("%w: the local provider needs a directory, the pollux program and gossip addresses to join", ErrConfig)
	case l.GPUs < 1:
		return nil, fmt.Errorf("%w: machines of %d GPUs", ErrConfig, l.GPUs)
	case l.BootDelay < 0:
		return nil, fmt.Errorf("%w: boot delay %v", ErrConfig, l.BootDelay)
	case !l.Insecure && (l.CACert == "" || l.CAKey == "" || l.GossipKey == ""):
		return nil, fmt.Errorf("%w: the local provider needs the cluster CA's certificate and key and the gossip key to start secure agents "+
			"(--insecure turns security off)", ErrConfig)
	}
	if !l.Insecure {
		// Fail now, not at the first scale-up.
		if _, err := pki.LoadCA(l.CACert, l.CAKey); err != nil {
			return nil, fmt.Errorf("%w: the cluster CA: %w", ErrConfig, err)
		}
	}
	dir, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	l.Dir = dir
	if l.ReadyTimeout <= 0 {
		l.ReadyTimeout = 60 * time.Second
	}
	if l.StopTimeout <= 0 {
		l.StopTimeout = 30 * time.Second
	}
	if l.Logger == nil {
		l.Logger = slog.Default()
	}
	return &l, os.MkdirAll(l.Dir, 0o700)
}

func (l *Local) machineDir(name string) string { return filepath.Join(l.Dir, name) }

// Add implements Provider: after the boot delay it starts the agent
// named name, unless one runs, and waits for its ready line.
func (l *Local) Add(ctx context.Context, name string) error {
	if err := (pki.Identity{Role: pki.RoleAgent, Name: name}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if pid := running(l.Dir, name); pid > 0 {
		l.Logger.Info("provider: agent already runs", "node", name, "pid", pid)
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(l.BootDelay):
	}
	dir := l.machineDir(name)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	args := append(append([]string{}, l.Exec[1:]...), "agent", "--name", name, "--gpus", strconv.Itoa(l.GPUs),
		"--data-dir", filepath.Join(dir, "data"), "--join", strings.Join(l.Join, ","))
	if l.Insecure {
		args = append(args, "--insecure")
	} else {
		cert, key, err := l.certificate(name)
		if err != nil {
			return err
		}
		args = append(args, "--ca", l.CACert, "--cert", cert, "--key", key, "--gossip-key", l.GossipKey)
	}
	if l.GPUType != "" {
		args = append(args, "--gpu-type", l.GPUType)
	}
	args = append(args, l.Args...)
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	// The ready line goes to a file, not a pipe: the agent outlives this
	// server, and a pipe without a reader would kill it at its next write.
	readyPath := filepath.Join(dir, "stdout")
	outf, err := os.OpenFile(readyPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		logf.Close()
		return fmt.Errorf("provider: %w", err)
	}
	cmd := exec.Command(l.Exec[0], args...)
	cmd.Env = append(os.Environ(), l.Env...)
	cmd.Stdout, cmd.Stderr = outf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	outf.Close()
	logf.Close()
	if err != nil {
		return fmt.Errorf("%w: starting %s: %w", ErrAgent, name, err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reaps it whoever stops it
		close(exited)
	}()
	if err := writeFileAtomic(filepath.Join(dir, "pid"), []byte(strconv.Itoa(pid)+"\n")); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return err
	}
	deadline := time.Now().Add(l.ReadyTimeout)
	for {
		if b, _ := os.ReadFile(readyPath); bytes.HasPrefix(b, []byte("{")) && bytes.IndexByte(b, '\n') > 0 {
			l.Logger.Info("provider: agent started", "node", name, "pid", pid, "log", logf.Name())
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %s exited before it was ready; see %s", ErrAgent, name, logf.Name())
		case <-ctx.Done():
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			return fmt.Errorf("%w: agent %s not ready after %v (killed); see %s", ErrTimeout, name, l.ReadyTimeout, logf.Name())
		}
	}
}

// certificate issues name's agent certificate from the cluster CA, once.
func (l *Local) certificate(name string) (cert, key string, err error) {
	dir := filepath.Join(l.machineDir(name), "tls")
	id := pki.Identity{Role: pki.RoleAgent, Name: name}
	c, k := pki.CertFiles(id)
	cert, key = filepath.Join(dir, c), filepath.Join(dir, k)
	if _, err := os.Stat(key); err == nil {
		return cert, key, nil
	}
	ca, err := pki.LoadCA(l.CACert, l.CAKey)
	if err != nil {
		return "", "", fmt.Errorf("provider: %w", err)
	}
	is, err := ca.Issue(pki.CertRequest{Identity: id})
	if err != nil {
		return "", "", fmt.Errorf("provider: certificate of %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("provider: %w", err)
	}
	if _, _, err := pki.WriteIssued(dir, id, is); err != nil {
		return "", "", fmt.Errorf("provider: %w", err)
	}
	return cert, key, nil
}

// Remove implements Provider: SIGTERM to the agent's process group (it
// stops its workers and leaves the gossip), SIGKILL after StopTimeout.
func (l *Local) Remove(ctx context.Context, name string) error {
	if err := (pki.Identity{Role: pki.RoleAgent, Name: name}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return stop(ctx, l.Dir, name, l.StopTimeout, l.Logger)
}

// Running lists the machines whose agents run, by name.
func (l *Local) Running() []string { return Running(l.Dir) }

// StopAll removes every machine that runs (the end of a demo or test).
func (l *Local) StopAll(ctx context.Context) error {
	return StopAll(ctx, l.Dir, l.StopTimeout, l.Logger)
}

// Running lists the machines of a local provider's directory whose
// agents run, by name: what runs, seen from outside the cluster.
func Running(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if e.IsDir() && running(dir, e.Name()) > 0 {
			names = append(names, e.Name())
		}
	}
	return names
}

// StopAll stops every agent of a local provider's directory that runs
// (SIGTERM, SIGKILL after timeout): whoever started a cluster stops its
// machines with it.
func StopAll(ctx context.Context, dir string, timeout time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	var errs []error
	for _, name := range Running(dir) {
		errs = append(errs, stop(ctx, dir, name, timeout, log))
	}
	return errors.Join(errs...)
}

// stop stops name's agent if it runs and waits until it is gone.
func stop(ctx context.Context, dir, name string, timeout time.Duration, log *slog.Logger) error {
	pid := running(dir, name)
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(timeout)
	for running(dir, name) != 0 {
		if time.Now().After(deadline) {
			log.Warn("provider: agent still running after SIGTERM: killed", "node", name, "pid", pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			deadline = time.Now().Add(timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	_ = os.Remove(filepath.Join(dir, name, "pid"))
	log.Info("provider: agent stopped", "node", name, "pid", pid)
	return nil
}

// running is the pid of name's agent if it runs (not a zombie), checked
// against its command line so that a reused pid is not taken for it.
func running(dir, name string) int {
	b, err := os.ReadFile(filepath.Join(dir, name, "pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("\x00--name\x00"+name+"\x00")) {
		return 0
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The state follows the command name in parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return 0
	}
	return pid
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("provider: %w", err)
	}
	return nil
}
