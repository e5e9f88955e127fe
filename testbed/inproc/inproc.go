// Package inproc runs emulated workers as goroutines inside the node's
// process: the control plane's tests and benchmarks exercise node
// actors, job actors and the allocator at scale without one OS process
// per worker. Workers follow the worker protocol's semantics (they
// restore and save the emulated checkpoint, report, and end with done);
// only the transport of their reports differs.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pollux/actors/node"
	"pollux/testbed"
	"pollux/testbed/emulator"
	"pollux/testbed/fabric"
)

// Crash is an application whose workers exit with status 3 at once;
// CrashOnce's do so in a job's first incarnation only.
const (
	Crash     = "crash"
	CrashOnce = "crash-once:"
)

// Launcher starts in-process emulated workers (a node.Launcher through
// its Launch method).
type Launcher struct {
	Catalog testbed.Catalog
	// TimeScale, Tick, ReportEvery and RestartCost are those of
	// emulator.Config.
	TimeScale   float64
	Tick        time.Duration
	ReportEvery time.Duration
	RestartCost time.Duration
	// AllRanks makes every rank report, not only rank 0.
	AllRanks bool
	// Links and Rack are those of emulator.Config: the network of racks
	// the process's workers share and the rack of this launcher's node.
	Links *fabric.Links
	Rack  int
	// Started, if set, is told about every worker started.
	Started func(node.WorkerSpec)
	Logger  *slog.Logger

	pids atomic.Int64
}

// Launch starts one worker.
func (l *Launcher) Launch(s node.WorkerSpec) (node.Worker, error) {
	app := s.App
	crash := app == Crash
	if len(app) > len(CrashOnce) && app[:len(CrashOnce)] == CrashOnce {
		app = app[len(CrashOnce):]
		crash = s.Env.Incarnation == 1
	}
	a := l.Catalog[app]
	if a == nil && !crash {
		return nil, fmt.Errorf("inproc: unknown application %q", s.App)
	}
	if l.Started != nil {
		l.Started(s)
	}
	log := l.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{pid: int(1<<22 + l.pids.Add(1)), cancel: cancel, done: make(chan struct{}), cont: make(chan struct{})}
	close(w.cont)
	go func() {
		defer close(w.done)
		if crash {
			w.exit = node.Exit{Code: 3}
			return
		}
		_, err := emulator.Run(ctx, emulator.Config{Env: s.Env, App: a, TimeScale: l.TimeScale, Tick: l.Tick,
			ReportEvery: l.ReportEvery, RestartCost: l.RestartCost, Deliver: s.Report, AllRanks: l.AllRanks, Logger: log,
			Hold: w.hold, Links: l.Links, Rack: l.Rack})
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case w.killed:
			w.exit = node.Exit{Code: -1, Signal: syscall.SIGKILL}
		case err != nil:
			log.Warn("inproc: worker failed", "job", s.Env.JobID, "err", err)
			w.exit = node.Exit{Code: 4}
		}
	}()
	return w, nil
}

type worker struct {
	pid    int
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	killed bool
	cont   chan struct{} // closed unless paused
	exit   node.Exit
}

func (w *worker) Pid() int { return w.pid }

// errKilled ends a killed worker's emulator without a checkpoint.
var errKilled = errors.New("inproc: killed")

// Signal acts as the signal on a process: SIGTERM lets the worker
// checkpoint and end, SIGKILL ends it at once without writing anything,
// SIGSTOP pauses it (no progress, no checkpoint) until SIGCONT.
func (w *worker) Signal(sig syscall.Signal) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	paused := w.paused()
	switch sig {
	case syscall.SIGSTOP:
		if !paused {
			w.cont = make(chan struct{})
		}
		return nil
	case syscall.SIGCONT:
		if paused {
			close(w.cont)
		}
		return nil
	case syscall.SIGKILL:
		w.killed = true
		if paused {
			close(w.cont)
		}
	}
	w.cancel()
	return nil
}

func (w *worker) paused() bool {
	select {
	case <-w.cont:
		return false
	default:
		return true
	}
}

// hold blocks while the worker is paused (as a stopped process, it
// waits for SIGCONT or SIGKILL whatever else it is sent).
func (w *worker) hold() error {
	for {
		w.mu.Lock()
		killed, paused, cont := w.killed, w.paused(), w.cont
		w.mu.Unlock()
		switch {
		case killed:
			return errKilled
		case !paused:
			return nil
		}
		<-cont
	}
}

func (w *worker) Wait() node.Exit {
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.exit
}
