package goodput

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Memo bounds: lookups with n <= MemoNodes and k <= MemoReplicas are
// memoised; larger ones are computed on every call (still without
// allocating). A job spans at most 16 nodes and, adaptively, 64 replicas.
const (
	MemoNodes    = 16
	MemoReplicas = 64
)

// unset marks a memo cell that has not been computed yet (a NaN payload no
// arithmetic produces).
const unset = 0x7ff8dead0000beef

// Speedup is a job's bid: its best goodput on (N, K) divided by its best
// goodput at a base placement. Lookups are memoised in a dense table;
// concurrent lookups are safe (cells are written atomically and computing
// one twice gives the same value) and allocate nothing, except the first
// lookup across racks, which allocates that table.
type Speedup struct {
	model Model
	base  float64
	memo  memoTable
	// cross memoises placements across r racks (cross[r], when the model
	// prices them differently), each table allocated on first use.
	cross [MemoNodes + 1]atomic.Pointer[memoTable]
}

type memoTable [(MemoNodes + 1) * (MemoReplicas + 1)]atomic.Uint64

func newMemoTable() *memoTable {
	t := new(memoTable)
	t.reset()
	return t
}

func (t *memoTable) reset() {
	for i := range t {
		t[i].Store(unset)
	}
}

// NewSpeedup returns the speedup function of model relative to its best
// goodput on baseK replicas over baseN nodes. It fails if the model is
// invalid or has no feasible configuration at the base.
func NewSpeedup(model Model, baseN, baseK int) (*Speedup, error) {
	if err := model.Validate(); err != nil {
		return nil, err
	}
	if baseN < 1 || baseK < baseN {
		return nil, fmt.Errorf("%w: base %d nodes, %d replicas", ErrBadPlacement, baseN, baseK)
	}
	cfg, ok := model.optimize(baseN, baseK)
	if !ok {
		return nil, fmt.Errorf("%w: at base %d nodes, %d replicas", ErrNoConfig, baseN, baseK)
	}
	s := &Speedup{model: model, base: cfg.Goodput}
	s.memo.reset()
	return s, nil
}

// Model returns the model the speedup was built from.
func (s *Speedup) Model() Model { return s.model }

// BaseGoodput is the goodput at the base placement.
func (s *Speedup) BaseGoodput() float64 { return s.base }

// At is the speedup on k replicas over n nodes: 0 for k == 0, for an
// impossible placement (n < 1 or k < n) and where no batch configuration
// is feasible.
func (s *Speedup) At(n, k int) float64 {
	if k <= 0 || n < 1 || k < n {
		return 0
	}
	if n > MemoNodes || k > MemoReplicas {
		return s.compute(n, k)
	}
	cell := &s.memo[n*(MemoReplicas+1)+k]
	if bits := cell.Load(); bits != unset {
		return math.Float64frombits(bits)
	}
	v := s.compute(n, k)
	cell.Store(math.Float64bits(v))
	return v
}

func (s *Speedup) compute(n, k int) float64 {
	return s.computeRacks(1, n, k)
}

// AtRacks is the speedup on k replicas over n nodes spread over r racks
// (r <= 1: one rack, as At). A model without a cross-rack term prices
// racks as free, so its lookups are At's.
func (s *Speedup) AtRacks(r, n, k int) float64 {
	if r <= 1 || !s.model.Params.CrossRackKnown() {
		return s.At(n, k)
	}
	if k <= 0 || n < r || k < n {
		return 0
	}
	if n > MemoNodes || k > MemoReplicas {
		return s.computeRacks(r, n, k)
	}
	t := s.cross[r].Load()
	if t == nil {
		s.cross[r].CompareAndSwap(nil, newMemoTable())
		t = s.cross[r].Load()
	}
	cell := &t[n*(MemoReplicas+1)+k]
	if bits := cell.Load(); bits != unset {
		return math.Float64frombits(bits)
	}
	v := s.computeRacks(r, n, k)
	cell.Store(math.Float64bits(v))
	return v
}

func (s *Speedup) computeRacks(r, n, k int) float64 {
	cfg, ok := s.model.optimizeRacks(r, n, k)
	if !ok {
		return 0
	}
	return cfg.Goodput / s.base
}
