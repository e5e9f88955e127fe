package node

import (
	"io"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"pollux/actors/node/workerproto"
)

// WorkerSpec is what a Launcher starts: one worker of one job incarnation.
type WorkerSpec struct {
	// Argv is the program and its arguments (for an emulated application,
	// what Config.Emulator returned); App names the emulated application
	// ("" for a user command).
	Argv []string
	App  string
	// Env is the protocol environment; Environ the worker's whole
	// environment (Config.WorkerEnv, then Env's variables).
	Env     workerproto.Env
	Environ []string
	// RunAs is the user to run the worker as (nil: the agent's).
	RunAs *RunAs
	// Output receives the worker's stdout and stderr.
	Output io.Writer
	// Report hands a report to the node without the network, for workers
	// that run inside the node's process (the exec launcher does not use
	// it: its workers send to Env.ReportAddr).
	Report func(workerproto.Report)
}

// Worker is one started worker.
type Worker interface {
	// Pid is its process id (a made-up one for in-process workers).
	Pid() int
	// Signal sends sig (SIGTERM, SIGKILL, or SIGSTOP and SIGCONT to
	// pause and resume it) to the worker and everything it started.
	Signal(sig syscall.Signal) error
	// Wait blocks until the worker has ended and says how.
	Wait() Exit
}

// Exit is how a worker ended.
type Exit struct {
	// Code is the exit status (-1 when a signal ended it).
	Code int
	// Signal is the signal that ended it, if one did.
	Signal syscall.Signal
}

// Launcher starts workers. ExecLauncher, the default, runs OS processes;
// tests and benchmarks run emulated workers inside the process.
type Launcher func(WorkerSpec) (Worker, error)

// RunAs is a user workers run as: its ids and its groups (set with
// setuid, setgid and setgroups when the worker starts).
type RunAs struct {
	User     string
	UID, GID uint32
	Groups   []uint32
}

// ExecLauncher starts each worker as an OS process in its own process
// group, with Pdeathsig SIGKILL: if the agent dies, its workers die too.
// With RunAs it runs as that user, with that user's groups only.
func ExecLauncher(s WorkerSpec) (Worker, error) {
	c := exec.Command(s.Argv[0], s.Argv[1:]...)
	c.Env = slices.Clip(s.Environ)
	c.Stdout, c.Stderr = s.Output, s.Output
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Output that is not a file is copied from a pipe, which a worker's
	// own children may hold open after it exits: Wait gives up on them.
	c.WaitDelay = outputDelay
	if u := s.RunAs; u != nil {
		c.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: slices.Clone(u.Groups)}
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	return execWorker{c}, nil
}

// outputDelay is how long Wait copies a worker's output after it exits.
const outputDelay = 5 * time.Second

type execWorker struct{ c *exec.Cmd }

func (w execWorker) Pid() int { return w.c.Process.Pid }

func (w execWorker) Signal(sig syscall.Signal) error { return syscall.Kill(-w.c.Process.Pid, sig) }

func (w execWorker) Wait() Exit {
	_ = w.c.Wait()
	st := w.c.ProcessState
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: st.ExitCode()}
}
