package history

import (
	"fmt"
	"os"
	"sync"

	"pollux/testbed/chaos/mono"
)

// Recorder appends lines to a history file. It is safe for concurrent
// use; it stamps each line with CLOCK_MONOTONIC under its lock, so lines
// are written in time order. The first error sticks: every later call
// returns it, and Err reports it, so a run whose history lost a line
// cannot pass.
type Recorder struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	nextID uint64
	err    error
}

// Create creates the history file at path (it must not exist).
func Create(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	return &Recorder{f: f, path: path}, nil
}

// Path is the file's path.
func (r *Recorder) Path() string { return r.path }

// NextID returns a fresh operation id.
func (r *Recorder) NextID() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	return r.nextID
}

// Op appends an operation step stamped now and returns the stamp.
func (r *Recorder) Op(o Op) (int64, error) { return r.add(Line{Op: &o}) }

// Event appends a harness event stamped now and returns the stamp.
func (r *Recorder) Event(e Event) (int64, error) { return r.add(Line{Ev: &e}) }

func (r *Recorder) add(l Line) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	if r.f == nil {
		return 0, fmt.Errorf("%w: %s is closed", ErrIO, r.path)
	}
	l.T = mono.Now()
	b, err := Encode(&l)
	if err == nil {
		if _, werr := r.f.Write(b); werr != nil {
			err = fmt.Errorf("%w: append to %s: %w", ErrIO, r.path, werr)
		}
	}
	if err != nil {
		r.err = err
		return 0, err
	}
	return l.T, nil
}

// Err is the first error the recorder met (nil if none).
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the file (it is idempotent); later lines are refused.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIO, err)
	}
	return nil
}
