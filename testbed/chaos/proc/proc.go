//go:build unix

package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Sentinel errors.
var (
	// ErrTimeout is returned by Wait and WaitGone when the process is
	// still there after the timeout.
	ErrTimeout = errors.New("proc: timeout")
	// ErrExited is returned for a signal to a process already reaped.
	ErrExited = errors.New("proc: process already exited")
	// ErrClosed is returned by Start on a closed Group.
	ErrClosed = errors.New("proc: group closed")
	// ErrSurvivors is returned by Close when a process survived SIGKILL
	// for longer than the close timeout.
	ErrSurvivors = errors.New("proc: processes survived close")
)

// Spec describes a process to start.
type Spec struct {
	// Name labels the process in errors ("server/s1").
	Name string
	// Path is the executable, Args its arguments (without argv[0]).
	Path string
	Args []string
	// Env is added to the harness's own environment.
	Env []string
	// Dir is the working directory ("" for the harness's).
	Dir string
	// Stdout and Stderr receive the output; nil discards it.
	Stdout, Stderr io.Writer
}

// waitDelay bounds how long the reaper waits for a dead child's output
// pipes to drain, should a grandchild keep them open.
const waitDelay = time.Second

// Proc is a started process. Its methods are safe for concurrent use.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once reaped
	err  error         // from Wait, set before done closes
}

// PID is the process id, which is also its process group id.
func (p *Proc) PID() int { return p.pid }

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has been reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process's group. It fails with ErrExited once
// the process has been reaped (its pid may belong to someone else).
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%w: %s (pid %d)", ErrExited, p.Name, p.pid)
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("proc: %s to %s (pid %d): %w", sig, p.Name, p.pid, err)
	}
	return nil
}

// Kill is kill -9 of the process group.
func (p *Proc) Kill() error { return p.Signal(syscall.SIGKILL) }

// Stop pauses the process group (SIGSTOP).
func (p *Proc) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont resumes a stopped process group (SIGCONT).
func (p *Proc) Cont() error { return p.Signal(syscall.SIGCONT) }

// Wait waits up to timeout for the process to exit and returns its state;
// ErrTimeout if it is still running. A non-zero exit is not an error:
// read it from the state.
func (p *Proc) Wait(timeout time.Duration) (*os.ProcessState, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return nil, fmt.Errorf("%w: %s (pid %d) still running after %s", ErrTimeout, p.Name, p.pid, timeout)
	}
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		return p.cmd.ProcessState, fmt.Errorf("proc: wait %s: %w", p.Name, p.err)
	}
	return p.cmd.ProcessState, nil
}

// Group owns the processes it starts and the groups it tracks, and kills
// them all on Close.
type Group struct {
	mu      sync.Mutex
	procs   []*Proc
	tracked []int // process group ids
	closed  bool
	// CloseTimeout bounds how long Close waits for killed children to be
	// reaped and tracked groups to vanish.
	CloseTimeout time.Duration
}

// NewGroup returns an empty group.
func NewGroup() *Group { return &Group{CloseTimeout: 5 * time.Second} }

// Cleaner is what ForTest needs of a test: *testing.T, *testing.B and
// *testing.F satisfy it.
type Cleaner interface {
	Cleanup(func())
	Errorf(format string, args ...any)
}

// ForTest returns a group that is closed when the test ends, whether it
// passed or failed.
func ForTest(t Cleaner) *Group {
	g := NewGroup()
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return g
}

// Start starts a process in a process group of its own.
func (g *Group) Start(s Spec) (*Proc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("%w: cannot start %s", ErrClosed, s.Name)
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	cmd.WaitDelay = waitDelay
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", s.Name, err)
	}
	p := &Proc{Name: s.Name, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	g.procs = append(g.procs, p)
	return p, nil
}

// Track makes Close kill process group pgid too: a group the harness did
// not start, such as an orphaned worker's.
func (g *Group) Track(pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tracked = append(g.tracked, pgid)
}

// Untrack forgets a tracked group (its processes are known gone), so that
// Close never signals a group id that another process may have reused.
func (g *Group) Untrack(pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := slices.Index(g.tracked, pgid); i >= 0 {
		g.tracked = slices.Delete(g.tracked, i, i+1)
	}
}

// Close kills every process group the group started or tracks (also
// those whose leader already exited: their children may not have), waits
// until every child is reaped and every tracked group is gone, and
// refuses further starts. It is idempotent.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	procs, tracked := g.procs, g.tracked
	g.mu.Unlock()

	pgids := append([]int(nil), tracked...)
	for _, p := range procs {
		pgids = append(pgids, p.pid)
	}
	for _, pg := range pgids {
		// ESRCH: the group is already empty.
		_ = syscall.Kill(-pg, syscall.SIGKILL)
	}
	deadline := time.Now().Add(g.CloseTimeout)
	var survivors []string
	for _, p := range procs {
		if _, err := p.Wait(time.Until(deadline)); errors.Is(err, ErrTimeout) {
			survivors = append(survivors, fmt.Sprintf("%s (pid %d)", p.Name, p.pid))
		}
	}
	for _, pg := range tracked {
		if err := WaitGone(pg, time.Until(deadline)); err != nil {
			survivors = append(survivors, fmt.Sprintf("tracked pid %d", pg))
		}
	}
	if len(survivors) > 0 {
		return fmt.Errorf("%w: %v", ErrSurvivors, survivors)
	}
	return nil
}

// Alive reports whether pid names a live process: one that exists and is
// not a zombie (a zombie holds no resources; it only waits to be reaped).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		// No procfs (or the process just vanished): trust kill(2);
		// EPERM means it exists under another user.
		return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return true
	}
	switch stat[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

// WaitGone polls until pid is not Alive, or returns ErrTimeout.
func WaitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for Alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: pid %d still alive after %s", ErrTimeout, pid, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
