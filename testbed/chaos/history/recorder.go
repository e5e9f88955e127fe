package history

import (
	"fmt"
	"os"
	"time"
)

// Recorder appends events to a history file. It is safe for concurrent
// use, and any number of Recorders in any number of processes may append
// to the same file: each event is one write(2) of at most MaxLine bytes
// to a file opened with O_APPEND, which Linux never interleaves with
// another write to the same file.
//
// A nil *Recorder records nothing and returns no errors, so code that may
// run without a harness records unconditionally.
type Recorder struct {
	f     *os.File
	src   string
	clock Clock
}

// Open opens (creating it if needed) the history file at path for
// appending, as recorder src, stamping events with clock.
func Open(path, src string, clock Clock) (*Recorder, error) {
	if err := checkName("src", src, true); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Recorder{f: f, src: src, clock: clock}, nil
}

// Now reads the recorder's clock (0 on a nil Recorder). Read it before an
// action whose start must not be recorded late (starting a worker), then
// pass it to RecordAt.
func (r *Recorder) Now() time.Duration {
	if r == nil {
		return 0
	}
	return r.clock.Now()
}

// Record stamps e with the current time and the recorder's source, and
// appends it.
func (r *Recorder) Record(e Event) error {
	if r == nil {
		return nil
	}
	return r.RecordAt(r.clock.Now(), e)
}

// RecordAt appends e stamped with time t and the recorder's source.
func (r *Recorder) RecordAt(t time.Duration, e Event) error {
	if r == nil {
		return nil
	}
	e.T, e.Src = t, r.src
	b, err := Encode(&e)
	if err != nil {
		return err
	}
	if _, err := r.f.Write(b); err != nil {
		return fmt.Errorf("history: append: %w", err)
	}
	return nil
}

// Close closes the file.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}
