package optimizer

import (
	"sync"

	"pollux/optimizer/goodput"
)

// GoodputCache memoises jobs' best goodput per (nodes, replicas) across
// rounds, keyed by the model: a model that did not change since the last
// round costs a table lookup. Entries unused for a round are dropped at
// the next Sweep. Safe for concurrent use; the zero value is ready.
type GoodputCache struct {
	mu        sync.Mutex
	cur, prev map[goodput.Model]*goodput.Speedup
}

// goodputAt is a model's best goodput on k replicas over n nodes (0 when no
// batch configuration is feasible), through c when not nil.
func (c *GoodputCache) goodputAt(md goodput.Model, n, k int) float64 {
	if s := c.speedup(md); s != nil {
		return s.At(n, k) * s.BaseGoodput()
	}
	return bestGoodput(md, n, k)
}

// speedup returns the memo of md (its speedup over one GPU), or nil when
// md has no feasible configuration on one GPU or c is nil.
func (c *GoodputCache) speedup(md goodput.Model) *goodput.Speedup {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.cur[md]; ok {
		return s
	}
	s, ok := c.prev[md]
	if !ok {
		var err error
		if s, err = goodput.NewSpeedup(md, 1, 1); err != nil {
			s = nil
		}
	}
	if c.cur == nil {
		c.cur = map[goodput.Model]*goodput.Speedup{}
	}
	c.cur[md] = s
	return s
}

// Sweep ends a round: models not used since the previous Sweep are
// forgotten.
func (c *GoodputCache) Sweep() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prev, c.cur = c.cur, nil
}
