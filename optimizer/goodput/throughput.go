package goodput

import (
	"fmt"
	"math"
)

// tiny stands for "no time at all" where the model needs a positive number.
const tiny = 1e-8

// Params are the seven throughput-model parameters of one job.
//
// One micro-step of compute on an atomic batch m takes AlphaC + BetaC*m.
// One gradient synchronisation takes AlphaR + BetaR*max(K-2, tiny) within a
// node and AlphaN + BetaN*max(K-2, tiny) across nodes. Compute and
// synchronisation overlap as a Gamma-norm.
type Params struct {
	AlphaC float64 `json:"alpha_c"`
	BetaC  float64 `json:"beta_c"`
	AlphaN float64 `json:"alpha_n"`
	BetaN  float64 `json:"beta_n"`
	AlphaR float64 `json:"alpha_r"`
	BetaR  float64 `json:"beta_r"`
	Gamma  float64 `json:"gamma"`
}

// Validate reports whether p can be evaluated: every term finite and
// positive, gamma in [1, 10].
func (p Params) Validate() error {
	for i, v := range p.slice() {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: parameter %d is %v", ErrBadParams, i, v)
		}
	}
	if p.Gamma < 1 || p.Gamma > 10 {
		return fmt.Errorf("%w: gamma %v outside [1, 10]", ErrBadParams, p.Gamma)
	}
	return nil
}

func (p Params) slice() [7]float64 {
	return [7]float64{p.AlphaC, p.BetaC, p.AlphaN, p.BetaN, p.AlphaR, p.BetaR, p.Gamma}
}

func paramsFrom(v [7]float64) Params {
	return Params{v[0], v[1], v[2], v[3], v[4], v[5], v[6]}
}

// Slice returns the parameters in the order AlphaC, BetaC, AlphaN,
// BetaN, AlphaR, BetaR, Gamma (how encodings write them).
func (p Params) Slice() [7]float64 { return p.slice() }

// ParamsFrom is the inverse of Params.Slice.
func ParamsFrom(v [7]float64) Params { return paramsFrom(v) }

// AccumTime is the compute time of one micro-step on atomic batch m.
func (p Params) AccumTime(m float64) float64 {
	return p.AlphaC + p.BetaC*m
}

// NetworkTime is the time of one gradient synchronisation among k replicas
// on n nodes: ~0 for one replica, the intra-node link for one node, the
// inter-node link otherwise.
func (p Params) NetworkTime(n, k int) float64 {
	alpha, beta := tiny, tiny
	switch {
	case n > 1:
		alpha, beta = p.AlphaN, p.BetaN
	case k > 1:
		alpha, beta = p.AlphaR, p.BetaR
	}
	return alpha + beta*math.Max(float64(k-2), tiny)
}

// SyncTime is the time of one synchronised step on atomic batch m: compute
// and network overlapped as a gamma-norm.
func (p Params) SyncTime(n, k int, m float64) float64 {
	return overlap(p.AccumTime(m), p.NetworkTime(n, k), p.Gamma)
}

func overlap(acc, net, gamma float64) float64 {
	if gamma == 1 {
		return acc + net
	}
	return math.Pow(math.Pow(acc, gamma)+math.Pow(net, gamma), 1/gamma)
}

// IterTime is the time of one iteration: s accumulation micro-steps then one
// synchronised step.
func (p Params) IterTime(n, k int, m float64, s int) float64 {
	acc := p.AccumTime(m)
	return float64(s)*acc + overlap(acc, p.NetworkTime(n, k), p.Gamma)
}

// Throughput is samples per second with k replicas on n nodes, atomic batch
// m and s accumulation steps: M / IterTime with M = k*m*(s+1).
func (p Params) Throughput(n, k int, m float64, s int) float64 {
	return float64(k) * m * float64(s+1) / p.IterTime(n, k, m, s)
}
