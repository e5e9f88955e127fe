package dashboard

import (
	"maps"
	"slices"
	"time"

	"pollux/consensus/state"
)

// Sample is one point of the time series: GPUs in use (of the alive
// nodes' GPUs), jobs running (running or rescaling) and pending, and
// the cluster's goodput (Overview.Goodput), at Time (Unix seconds), as
// this server's copy of the state showed them.
type Sample struct {
	Time     float64 `json:"t"`
	GPUsUsed int     `json:"gpus_used"`
	GPUs     int     `json:"gpus"`
	Running  int     `json:"running"`
	Pending  int     `json:"pending"`
	Goodput  float64 `json:"goodput"`
}

// ring is a bounded buffer keeping the newest cap items.
type ring[T any] struct {
	buf  []T
	next int
	full bool
}

func newRing[T any](n int) *ring[T] { return &ring[T]{buf: make([]T, max(n, 1))} }

func (r *ring[T]) add(v T) {
	r.buf[r.next] = v
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

func (r *ring[T]) len() int {
	if r.full {
		return len(r.buf)
	}
	return r.next
}

// last returns the newest item (ok false when empty).
func (r *ring[T]) last() (T, bool) {
	var zero T
	if r.len() == 0 {
		return zero, false
	}
	return r.buf[(r.next-1+len(r.buf))%len(r.buf)], true
}

// items returns the items oldest first, from the first that keep says
// is wanted (items are in time order, so keep is monotone).
func (r *ring[T]) items(keep func(T) bool) []T {
	out := make([]T, 0, r.len())
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	out = append(out, r.buf[:r.next]...)
	i, _ := slices.BinarySearchFunc(out, true, func(v T, _ bool) int {
		if keep(v) {
			return 1
		}
		return -1
	})
	return out[i:]
}

// sampleOf computes the sample of st at t, with the jobs table js.
func sampleOf(t float64, st *state.State, js []Job) Sample {
	s := Sample{Time: t}
	s.GPUs, s.GPUsUsed = st.GPUCounts()
	for _, j := range st.Jobs {
		switch j.State {
		case state.Running, state.Rescaling:
			s.Running++
		case state.Pending:
			s.Pending++
		}
	}
	s.Goodput = goodputOf(js)
	return s
}

// goodputOf sums the goodput of the jobs that hold GPUs.
func goodputOf(js []Job) float64 {
	total := 0.0
	for _, j := range js {
		if j.Active && j.GPUs > 0 {
			total += j.Goodput
		}
	}
	return total
}

// Sample takes one sample of this server's local state now: a point of
// the time series, and each job's gradient statistics if they changed.
// Run calls it every SampleEvery; tests call it with an injected clock.
func (d *Dashboard) Sample() {
	st := d.cfg.Backend.LocalState()
	now := unix(d.cfg.Now())
	s := sampleOf(now, st, jobsOf(st, &d.bases))
	d.bases.prune(st)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.series.add(s)
	for id, j := range st.Jobs {
		grad, ok := gradOf(j)
		if !ok {
			continue
		}
		h := d.grads[id]
		if h == nil {
			h = newRing[GradPoint](d.cfg.GradHistory)
			d.grads[id] = h
		}
		p := gradPoint(now, grad, j.Spec.Limits.InitBatch)
		if last, ok := h.last(); !ok || last.GradSqr != p.GradSqr || last.GradVar != p.GradVar {
			h.add(p)
		}
	}
	// Jobs pruned from the state take their history with them.
	for _, id := range slices.Collect(maps.Keys(d.grads)) {
		if st.Jobs[id] == nil {
			delete(d.grads, id)
		}
	}
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
