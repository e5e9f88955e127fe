package record

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"pollux/testbed/chaos/mono"
)

// Writer appends one worker's records to its own file. A nil *Writer
// records nothing and returns no error, so a worker records
// unconditionally. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	id   Record // the identity every record carries
	path string
}

// FromEnv opens the record file of worker (job, inc, rank) in the
// directory EnvDir names, and writes its start record stamped t (read by
// the caller as the process began) with gpus. Without EnvDir it returns a
// nil Writer and no error.
func FromEnv(t int64, job string, inc uint64, rank int, gpus []int) (*Writer, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return nil, nil
	}
	return Create(dir, t, job, inc, rank, gpus)
}

// Create creates dir/<job>.<inc>.<rank>.<pid>.jsonl (it must not exist)
// holding the start record: the record is written to a temporary name
// (TempSuffix) and renamed, so that the file never exists without its
// start. A worker killed before the rename leaves only the temporary
// file: it never got past its start, and readers skip it.
func Create(dir string, t int64, job string, inc uint64, rank int, gpus []int) (*Writer, error) {
	pid := os.Getpid()
	boot, err := mono.StartTicks(pid)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	w := &Writer{id: Record{Job: job, Inc: inc, Rank: rank, PID: pid}}
	start := w.id
	start.T, start.Kind, start.Boot, start.GPUs = t, Start, boot, gpus
	if err := start.Validate(); err != nil {
		return nil, err
	}
	w.path = filepath.Join(dir, job+"."+strconv.FormatUint(inc, 10)+"."+strconv.Itoa(rank)+"."+strconv.Itoa(pid)+".jsonl")
	if _, err := os.Lstat(w.path); err == nil {
		return nil, fmt.Errorf("%w: %s exists", ErrIO, w.path)
	}
	tmp := w.path + TempSuffix
	if w.f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	if err := w.write(start); err != nil {
		w.f.Close()
		return nil, err
	}
	if err := os.Rename(tmp, w.path); err != nil {
		w.f.Close()
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	return w, nil
}

// Path is the file written ("" for a nil Writer).
func (w *Writer) Path() string {
	if w == nil {
		return ""
	}
	return w.path
}

// Restore records the checkpoint read, which began at t0: written by
// incarnation from at epoch and progress, or none (fresh).
func (w *Writer) Restore(t0 int64, fresh bool, from uint64, epoch int, progress float64) error {
	return w.add(Record{T0: t0, Kind: Restore, Fresh: fresh, From: from, Epoch: epoch, Progress: progress})
}

// Checkpoint records a checkpoint written (and made visible), which began
// at t0.
func (w *Writer) Checkpoint(t0 int64, epoch int, progress float64, finished bool) error {
	return w.add(Record{T0: t0, Kind: Checkpoint, Epoch: epoch, Progress: progress, Finished: finished})
}

// Done records that training is finished; call it before sending the
// final report.
func (w *Writer) Done(epoch int, progress float64) error {
	return w.add(Record{Kind: Done, Epoch: epoch, Progress: progress})
}

// Exit records the exit status about to be returned and closes the file.
func (w *Writer) Exit(code int) error {
	if w == nil {
		return nil
	}
	err := w.add(Record{Kind: Exit, Code: code})
	w.mu.Lock()
	defer w.mu.Unlock()
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("%w: %w", ErrIO, cerr)
	}
	return err
}

// add stamps r with the worker's identity and the time now, and appends it.
func (w *Writer) add(r Record) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r.Job, r.Inc, r.Rank, r.PID = w.id.Job, w.id.Inc, w.id.Rank, w.id.PID
	r.T = mono.Now()
	if err := r.Validate(); err != nil {
		return err
	}
	return w.write(r)
}

// write appends r as one write(2).
func (w *Writer) write(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(b)+1 > MaxLine {
		return fmt.Errorf("%w: record of %d bytes", ErrMalformed, len(b)+1)
	}
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	return nil
}
