// Package logbuf is the log sink the tests read while the code under test
// writes to it from other goroutines (slog handlers, process output), and
// the line filter the harnesses use on log files.
//
// It exists so that every package's tests share one race-free buffer
// instead of each declaring its own copy.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is an io.Writer safe for concurrent use. The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the non-empty lines written so far that contain every one
// of subs.
func (l *Buffer) Lines(subs ...string) []string { return Matching(l.String(), subs...) }

// Matching returns the non-empty lines of text that contain every one of
// subs.
func Matching(text string, subs ...string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
