package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Exec runs operator-supplied commands to add and remove machines: the
// command's words, then the machine's name. A command that exits 0
// succeeded; one that fails or runs past Timeout (its whole process
// group is killed) is retried after Backoff, doubling, up to Attempts
// times. Every attempt's output is logged.
type Exec struct {
	AddCommand, RemoveCommand []string
	// Timeout bounds one attempt (default 5 min); Attempts (default 3)
	// and Backoff (default 2 s) shape the retries.
	Timeout  time.Duration
	Attempts int
	Backoff  time.Duration
	Logger   *slog.Logger
}

// maxOutput bounds the output of one attempt that is kept for the log.
const maxOutput = 16 << 10

// NewExec checks and completes e.
func NewExec(e Exec) (*Exec, error) {
	if len(e.AddCommand) == 0 || len(e.RemoveCommand) == 0 || e.AddCommand[0] == "" || e.RemoveCommand[0] == "" {
		return nil, fmt.Errorf("%w: the exec provider needs an add and a remove command", ErrConfig)
	}
	if e.Timeout < 0 || e.Attempts < 0 || e.Backoff < 0 {
		return nil, fmt.Errorf("%w: timeout %v, %d attempts, backoff %v", ErrConfig, e.Timeout, e.Attempts, e.Backoff)
	}
	if e.Timeout == 0 {
		e.Timeout = 5 * time.Minute
	}
	if e.Attempts == 0 {
		e.Attempts = 3
	}
	if e.Backoff == 0 {
		e.Backoff = 2 * time.Second
	}
	if e.Logger == nil {
		e.Logger = slog.Default()
	}
	return &e, nil
}

// Add implements Provider.
func (e *Exec) Add(ctx context.Context, name string) error {
	return e.run(ctx, "add", e.AddCommand, name)
}

// Remove implements Provider.
func (e *Exec) Remove(ctx context.Context, name string) error {
	return e.run(ctx, "remove", e.RemoveCommand, name)
}

func (e *Exec) run(ctx context.Context, what string, argv []string, name string) error {
	attempt := 0
	return Retry(ctx, e.Attempts, e.Backoff, func(ctx context.Context) error {
		attempt++
		err := e.once(ctx, argv, name)
		if err != nil {
			e.Logger.Warn("provider: command failed", "op", what, "node", name, "attempt", attempt, "of", e.Attempts, "err", err)
		}
		return err
	})
}

// once runs one attempt.
func (e *Exec) once(ctx context.Context, argv []string, name string) error {
	ctx, cancel := context.WithTimeout(ctx, e.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:len(argv):len(argv)], name)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On the timeout, the whole group: a shell's children too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	var out limited
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	e.Logger.Info("provider: command", "cmd", strings.Join(cmd.Args, " "), "took", time.Since(start).Round(time.Millisecond),
		"err", err, "output", text)
	switch {
	case err == nil:
		return nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: %s %s after %v (killed): %q", ErrTimeout, argv[0], name, e.Timeout, text)
	default:
		return fmt.Errorf("%w: %s %s: %w: %q", ErrCommand, argv[0], name, err, text)
	}
}

// limited keeps the first maxOutput bytes written to it.
type limited struct{ bytes.Buffer }

func (l *limited) Write(b []byte) (int, error) {
	if room := maxOutput - l.Len(); room > 0 {
		l.Buffer.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}
