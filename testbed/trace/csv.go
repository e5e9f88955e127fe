package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// table is a decoded numeric CSV file: the header's columns in order and one
// row of values per data line, with the line each row came from.
type table struct {
	rows  [][]float64
	lines []int
}

// decodeTable reads a CSV file whose header must name exactly the columns
// of want, in any order (the Pollux artifact and Sia's artifact order them
// differently); rows come back with their values in want's order. Every
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
	// col[i] is the header position of want[i].
	col := make([]int, len(want))
	for i := range col {
		col[i] = -1
	}
	badHeader := len(header) != len(want)
	for pos, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		i := slices.Index(want, h)
		if i < 0 || col[i] >= 0 {
			badHeader = true
			break
		}
		col[i] = pos
	}
	if badHeader {
		return nil, fmt.Errorf("%w: %s:1: header %q, want the columns %q in any order", ErrMalformed, name, strings.Join(header, ","), strings.Join(want, ","))
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
		for i, pos := range col {
			f := rec[pos]
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
