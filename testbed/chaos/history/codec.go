package history

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// MaxLine is the longest encoded event, newline included. Linux appends a
// single write of this size to an O_APPEND regular file without
// interleaving it with other writers' writes.
const MaxLine = 4096

// Encode validates e and returns its JSON line, newline included.
func Encode(e *Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("history: encode: %w", err)
	}
	if len(b)+1 > MaxLine {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrTooLong, len(b)+1, MaxLine)
	}
	return append(b, '\n'), nil
}

// Decode reads a whole history from r, in file order. name prefixes error
// messages ("name:line: ..."). Every line must be one valid event
// terminated by a newline; the first bad line ends decoding with an error
// wrapping ErrMalformed.
func Decode(r io.Reader, name string) ([]Event, error) {
	br := bufio.NewReaderSize(r, MaxLine)
	var out []Event
	for line := 1; ; line++ {
		b, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, fmt.Errorf("%w: %s:%d: line longer than %d bytes", ErrMalformed, name, line, MaxLine)
		case err == io.EOF && len(b) == 0:
			return out, nil
		case err == io.EOF:
			return nil, fmt.Errorf("%w: %s:%d: last line not terminated (torn write?)", ErrMalformed, name, line)
		case err != nil:
			return nil, fmt.Errorf("history: %s:%d: %w", name, line, err)
		}
		e, err := decodeLine(b[:len(b)-1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		out = append(out, e)
	}
}

func decodeLine(b []byte) (Event, error) {
	var e Event
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Event{}, fmt.Errorf("%w: data after the event", ErrMalformed)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// ReadFile decodes the history file at path.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return Decode(f, path)
}

// Sort orders events by time, keeping file order among equal times.
func Sort(events []Event) {
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
}

// Digest returns the digest recorders put in a Commit event's Alloc: the
// first 16 hex digits of the SHA-256 of the allocation's canonical
// encoding (any encoding that is equal exactly when the allocations are).
func Digest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:8])
}
