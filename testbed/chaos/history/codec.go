package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"pollux/internal/jsonin"
)

// Encode validates l and returns its JSON line, newline included.
func Encode(l *Line) ([]byte, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrMalformed, err)
	}
	if len(b)+1 > MaxLine {
		return nil, fmt.Errorf("%w: line of %d bytes (at most %d)", ErrMalformed, len(b)+1, MaxLine)
	}
	return append(b, '\n'), nil
}

// Decode reads a whole history from r, in file order (name prefixes
// errors, "name:line: ..."). Every line must be one valid Line ending in a
// newline and no earlier than the line before. An empty input decodes to
// no lines: whether that is acceptable is the checker's call.
func Decode(r io.Reader, name string) ([]Line, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []Line
	var buf []byte
	for line := 1; ; line++ {
		buf = buf[:0]
		for {
			b, err := br.ReadSlice('\n')
			buf = append(buf, b...)
			if len(buf) > MaxLine {
				return nil, fmt.Errorf("%w: %s:%d: line longer than %d bytes", ErrMalformed, name, line, MaxLine)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF {
				if len(buf) == 0 {
					return out, nil
				}
				return nil, fmt.Errorf("%w: %s:%d: last line not terminated (truncated?)", ErrMalformed, name, line)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %s:%d: %w", ErrIO, name, line, err)
			}
			break
		}
		l, err := decodeLine(buf[:len(buf)-1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if len(out) > 0 && l.T < out[len(out)-1].T {
			return nil, fmt.Errorf("%w: %s:%d: time %d before the previous line's %d", ErrMalformed, name, line, l.T, out[len(out)-1].T)
		}
		out = append(out, l)
	}
}

func decodeLine(b []byte) (Line, error) {
	var l Line
	if err := jsonin.Decode(b, &l); err != nil {
		return Line{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return l, l.Validate()
}

// ReadFile decodes the history file at path.
func ReadFile(path string) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	defer f.Close()
	return Decode(f, path)
}
