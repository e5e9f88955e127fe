package goodput

import "math"

// GradStats are a job's gradient statistics measured at its initial batch
// M0: the squared norm of the true gradient and the per-sample variance
// (trace of the covariance).
type GradStats struct {
	GradSqr float64 `json:"grad_sqr"`
	GradVar float64 `json:"grad_var"`
}

// usable reports whether the statistics carry information. Zero, negative
// or non-finite statistics mean "unknown": efficiency is then 1.
func (g GradStats) usable() bool {
	return g.GradSqr > 0 && g.GradVar >= 0 && !math.IsInf(g.GradSqr, 0) && !math.IsInf(g.GradVar, 0)
}

// Gain is the progress one step at batch m makes, counted in steps at batch
// m0 (AdaScale's r_t, the learning-rate multiplier). It is 1 when the
// statistics are unusable or m0 is not positive.
func (g GradStats) Gain(m, m0 float64) float64 {
	if !g.usable() || !(m0 > 0) || !(m > 0) {
		return 1
	}
	scale := m / m0
	denom := g.GradVar/scale + g.GradSqr
	if !(denom > 0) {
		return 1
	}
	gain := (g.GradVar + g.GradSqr) / denom
	if math.IsNaN(gain) || math.IsInf(gain, 0) {
		return 1
	}
	return gain
}

// Efficiency is the statistical efficiency of batch m relative to m0,
// Gain/scale, in (0, 1] for m >= m0. Unusable statistics give 1.
func (g GradStats) Efficiency(m, m0 float64) float64 {
	if !g.usable() || !(m0 > 0) || !(m > 0) {
		return 1
	}
	return g.Gain(m, m0) * m0 / m
}
