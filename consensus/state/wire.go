package state

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// Bounds on decoded sizes, so garbage cannot make the decoder allocate
// without limit. They are also validation limits for commands.
const (
	maxString    = 4096 // bytes of one string
	maxID        = 253  // bytes of a job or node id
	maxList      = 1 << 16
	maxArgs      = 256  // command argv entries
	maxAddresses = 16   // addresses of one node
	maxProfile   = 4096 // distinct profiled configurations per job
)

// MaxJobs and MaxNodes bound how many jobs (finished ones included, until
// they are pruned) and nodes the state holds: what a snapshot can encode.
// Submissions and registrations beyond them are refused (ErrLimit).
const (
	MaxJobs  = maxList
	MaxNodes = maxList
)

// writer appends the primitives of the binary encoding: unsigned and
// signed varints, float64 as 8 little-endian bytes of its IEEE bits,
// strings and lists length-prefixed by a uvarint.
type writer struct{ b []byte }

func (w *writer) byte(v byte)      { w.b = append(w.b, v) }
func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) int(v int)        { w.b = binary.AppendVarint(w.b, int64(v)) }
func (w *writer) f64(v float64)    { w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(v)) }
func (w *writer) str(s string)     { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }

func (w *writer) bool(v bool) {
	if v {
		w.byte(1)
	} else {
		w.byte(0)
	}
}

func (w *writer) strs(ss []string) {
	w.uvarint(uint64(len(ss)))
	for _, s := range ss {
		w.str(s)
	}
}

// reader consumes what writer produced. The first error sticks: later
// reads return zero values, and err reports it.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) {
		r.fail("bad or non-minimal uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int() int {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 || (n > 1 && r.b[n-1] == 0) || v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *reader) f64() float64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail("truncated float")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b))
	r.b = r.b[8:]
	return v
}

func (r *reader) bool() bool {
	switch r.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("bad bool")
	return false
}

// length reads a list or string length and checks it against limit and,
// since every element takes at least one byte, against what is left.
func (r *reader) length(limit int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(limit) || n > uint64(len(r.b)) {
		r.fail("length %d over limit %d or input", n, limit)
		return 0
	}
	return int(n)
}

func (r *reader) str() string {
	n := r.length(maxString)
	if r.err != nil {
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	if !utf8.ValidString(s) {
		r.fail("string is not UTF-8")
		return ""
	}
	return s
}

func (r *reader) strs(limit int) []string {
	n := r.length(limit)
	if n == 0 {
		return nil
	}
	ss := make([]string, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		ss = append(ss, r.str())
	}
	return ss
}

// done fails if input is left over: every value has exactly one encoding.
func (r *reader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}
