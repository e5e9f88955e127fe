package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// table is a decoded numeric CSV file: the header's columns in order and one
// row of values per data line, with the line each row came from.
type table struct {
	rows  [][]float64
	lines []int
}

// decodeTable reads a CSV file whose header must be exactly want. Every
// value must parse as a finite number. name is used in errors.
func decodeTable(r io.Reader, name string, want []string) (*table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s:1: empty file, want header %q", ErrMalformed, name, strings.Join(want, ","))
		}
		return nil, fmt.Errorf("%w: %s:1: %v", ErrMalformed, name, err)
	}
	if len(header) != len(want) {
		return nil, fmt.Errorf("%w: %s:1: header %q, want %q", ErrMalformed, name, strings.Join(header, ","), strings.Join(want, ","))
	}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if h != want[i] {
			return nil, fmt.Errorf("%w: %s:1: header %q, want %q", ErrMalformed, name, strings.Join(header, ","), strings.Join(want, ","))
		}
	}
	t := &table{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrMalformed, name, line, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(want) {
			return nil, fmt.Errorf("%w: %s:%d: %d fields, want %d", ErrMalformed, name, line, len(rec), len(want))
		}
		row := make([]float64, len(rec))
		for i, f := range rec {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: %s:%d: column %s: %q is not a finite number", ErrMalformed, name, line, want[i], f)
			}
			row[i] = v
		}
		t.rows = append(t.rows, row)
		t.lines = append(t.lines, line)
	}
	if len(t.rows) == 0 {
		return nil, fmt.Errorf("%w: %s: no data rows", ErrMalformed, name)
	}
	return t, nil
}
