package goodput

import (
	"fmt"
	"math"
)

// candidates is how many total batch sizes the per-job search tries,
// spaced geometrically between the smallest and largest admissible batch.
const candidates = 50

// eps is the tolerance of the floor/ceil operations of the search.
const eps = 1e-8

// Limits are a job's batch-size constraints.
type Limits struct {
	// InitBatch is M0, the batch size the user gave (and the one the
	// gradient statistics are measured at).
	InitBatch int `json:"init_batch_size"`
	// MaxBatch is the largest total batch the job may run.
	MaxBatch int `json:"max_batch_size"`
	// MinLocal and MaxLocal bound the atomic (per-GPU) batch m.
	MinLocal int `json:"min_local_bsz"`
	MaxLocal int `json:"max_local_bsz"`
	// Accumulation allows gradient accumulation (s > 0).
	Accumulation bool `json:"accumulation"`
}

// Validate reports whether the limits are usable.
func (l Limits) Validate() error {
	switch {
	case l.InitBatch <= 0:
		return fmt.Errorf("%w: init batch %d", ErrBadLimits, l.InitBatch)
	case l.MaxBatch < l.InitBatch:
		return fmt.Errorf("%w: max batch %d below init batch %d", ErrBadLimits, l.MaxBatch, l.InitBatch)
	case l.MinLocal <= 0 || l.MaxLocal < l.MinLocal:
		return fmt.Errorf("%w: local batch range [%d, %d]", ErrBadLimits, l.MinLocal, l.MaxLocal)
	}
	return nil
}

// Config is one batch configuration of a job on a placement and what it is
// worth.
type Config struct {
	// Goodput is throughput times statistical efficiency, in samples per
	// second at M0-equivalent.
	Goodput float64 `json:"goodput"`
	// Throughput is raw samples per second.
	Throughput float64 `json:"throughput"`
	// LocalBatch is the atomic per-GPU batch m.
	LocalBatch int `json:"local_bsz"`
	// AccumSteps is s, the micro-steps accumulated before each sync.
	AccumSteps int `json:"accum_steps"`
	// TotalBatch is M = K*m*(s+1).
	TotalBatch int `json:"total_batch"`
	// Gain is the AdaScale learning-rate multiplier for TotalBatch.
	Gain float64 `json:"gain"`
}

// Model is everything needed to evaluate a job's goodput.
type Model struct {
	Params Params    `json:"params"`
	Grad   GradStats `json:"grad"`
	Limits Limits    `json:"limits"`
}

// Validate reports whether the model can be evaluated.
func (md Model) Validate() error {
	if err := md.Params.Validate(); err != nil {
		return err
	}
	return md.Limits.Validate()
}

// Goodput evaluates one configuration: k replicas on n nodes, atomic batch m
// and s accumulation steps.
func (md Model) Goodput(n, k, m, s int) float64 {
	return md.GoodputRacks(1, n, k, m, s)
}

// goodputNet is GoodputRacks with the placement's network time net and
// cross-rack time cross already computed (the same arithmetic).
func (md Model) goodputNet(net, cross float64, k, m, s int) float64 {
	p := md.Params
	acc := p.AccumTime(float64(m))
	iter := float64(s)*acc + overlap(acc, net, p.Gamma) + cross
	total := float64(k) * float64(m) * float64(s+1)
	return total / iter * md.Grad.Efficiency(total, float64(md.Limits.InitBatch))
}

// GoodputRacks is Goodput on n nodes spread over r racks.
func (md Model) GoodputRacks(r, n, k, m, s int) float64 {
	total := float64(k) * float64(m) * float64(s+1)
	return md.Params.ThroughputRacks(r, n, k, float64(m), s) * md.Grad.Efficiency(total, float64(md.Limits.InitBatch))
}

// Split is the batch-split rule of the per-job search: for a total batch
// near total on k replicas, the accumulation steps s and atomic batch m.
func (l Limits) Split(k int, total float64) (m, s int) {
	local := total / float64(k)
	if l.Accumulation {
		steps := math.Ceil(local/float64(l.MaxLocal)-eps) - 1
		if k == 1 && local > float64(l.InitBatch)+eps {
			steps = math.Max(steps, 1)
		}
		steps = math.Max(steps, 0)
		return int(math.Ceil(local/(steps+1) - eps)), int(steps)
	}
	if k == 1 {
		return l.InitBatch, 0
	}
	return int(math.Ceil(local - eps)), 0
}

// Optimize returns the configuration with the highest goodput on k replicas
// over n nodes, searching 50 total batch sizes spaced geometrically between
// max(M0, MinLocal*k) and MaxBatch. It returns ErrNoConfig when no candidate
// has its atomic batch within [MinLocal, MaxLocal].
func (md Model) Optimize(n, k int) (Config, error) {
	return md.OptimizeRacks(1, n, k)
}

// OptimizeRacks is Optimize on n nodes spread over r racks (r <= 1: one
// rack).
func (md Model) OptimizeRacks(r, n, k int) (Config, error) {
	if n < 1 || k < n || r > n {
		return Config{}, fmt.Errorf("%w: %d nodes in %d racks, %d replicas", ErrBadPlacement, n, r, k)
	}
	if err := md.Validate(); err != nil {
		return Config{}, err
	}
	best, ok := md.optimizeRacks(r, n, k)
	if !ok {
		return Config{}, fmt.Errorf("%w: %d replicas on %d nodes within local batch [%d, %d] and max batch %d",
			ErrNoConfig, k, n, md.Limits.MinLocal, md.Limits.MaxLocal, md.Limits.MaxBatch)
	}
	return best, nil
}

// optimize is Optimize without validation, for the memoised hot path.
func (md Model) optimize(n, k int) (Config, bool) {
	return md.optimizeRacks(1, n, k)
}

// optimizeRacks is OptimizeRacks without validation.
func (md Model) optimizeRacks(r, n, k int) (Config, bool) {
	l := md.Limits
	lo := math.Max(float64(l.InitBatch), float64(l.MinLocal*k))
	hi := float64(l.MaxBatch)
	if lo > hi {
		// Even the smallest atomic batch on every replica exceeds the
		// largest total batch the job allows.
		return Config{}, false
	}
	ratio := math.Pow(hi/lo, 1/float64(candidates-1))
	// The network time depends on the placement only: once for all
	// candidates.
	net, cross := md.Params.NetworkTime(n, k), md.Params.CrossRackTime(min(r, n))
	var best Config
	found := false
	total := lo
	for i := 0; i < candidates; i++ {
		if i == candidates-1 {
			total = hi
		}
		m, s := l.Split(k, total)
		if m >= l.MinLocal && m <= l.MaxLocal {
			g := md.goodputNet(net, cross, k, m, s)
			if !found || g > best.Goodput {
				found = true
				best = Config{Goodput: g, LocalBatch: m, AccumSteps: s}
			}
		}
		total *= ratio
	}
	if !found || !(best.Goodput > 0) || math.IsInf(best.Goodput, 0) {
		return Config{}, false
	}
	best.TotalBatch = k * best.LocalBatch * (best.AccumSteps + 1)
	best.Throughput = md.Params.ThroughputRacks(r, n, k, float64(best.LocalBatch), best.AccumSteps)
	best.Gain = md.Grad.Gain(float64(best.TotalBatch), float64(l.InitBatch))
	return best, true
}
