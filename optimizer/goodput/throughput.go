package goodput

import (
	"fmt"
	"math"
)

// tiny stands for "no time at all" where the model needs a positive number.
const tiny = 1e-8

// Params are the throughput-model parameters of one job: the seven of the
// paper plus one for synchronising across racks.
//
// One micro-step of compute on an atomic batch m takes AlphaC + BetaC*m.
// One gradient synchronisation takes AlphaR + BetaR*max(K-2, tiny) within a
// node and AlphaN + BetaN*max(K-2, tiny) across nodes. Compute and
// synchronisation overlap as a Gamma-norm.
//
// A placement across r > 1 racks adds CrossRackTime(r) = AlphaX *
// 2(r-1)/r to every synchronised step, after the overlap: exchanging the
// gradients among the racks moves 2(r-1)/r times them through each
// rack's uplink (a ring among the racks), which the backward pass no
// longer hides. AlphaX is zero while unknown: Fit sets it only from
// points measured across racks, and an unknown term prices racks as
// free. On a cluster of one rack it is never read, so the model is the
// paper's.
type Params struct {
	AlphaC float64 `json:"alpha_c"`
	BetaC  float64 `json:"beta_c"`
	AlphaN float64 `json:"alpha_n"`
	BetaN  float64 `json:"beta_n"`
	AlphaR float64 `json:"alpha_r"`
	BetaR  float64 `json:"beta_r"`
	Gamma  float64 `json:"gamma"`
	AlphaX float64 `json:"alpha_x,omitempty"`
}

// Validate reports whether p can be evaluated: every term finite and
// positive, gamma in [1, 10], the cross-rack term zero (unknown) or
// finite and positive.
func (p Params) Validate() error {
	for i, v := range p.slice() {
		if i == iAlphaX && v == 0 {
			continue
		}
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: parameter %s is %v", ErrBadParams, paramNames[i], v)
		}
	}
	if p.Gamma < 1 || p.Gamma > 10 {
		return fmt.Errorf("%w: gamma %v outside [1, 10]", ErrBadParams, p.Gamma)
	}
	return nil
}

// paramNames name the parameters in slice order.
var paramNames = [nParams]string{"alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma", "alpha_x"}

func (p Params) slice() [nParams]float64 {
	return [nParams]float64{p.AlphaC, p.BetaC, p.AlphaN, p.BetaN, p.AlphaR, p.BetaR, p.Gamma, p.AlphaX}
}

func paramsFrom(v [nParams]float64) Params {
	return Params{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
}

// CrossRackKnown reports whether p has a fitted cross-rack term.
func (p Params) CrossRackKnown() bool { return p.AlphaX > 0 }

// CrossRackTime is what spanning r racks adds to one synchronised step:
// AlphaX * 2(r-1)/r for r > 1 (0 while the term is unknown), 0 for one
// rack.
func (p Params) CrossRackTime(r int) float64 {
	if r <= 1 || !(p.AlphaX > 0) {
		return 0
	}
	return p.AlphaX * RackShare(r)
}

// RackShare is 2(r-1)/r, the gradients' multiple a ring all-reduce among
// r racks moves through each rack's uplink (0 for one rack).
func RackShare(r int) float64 {
	if r <= 1 {
		return 0
	}
	return 2 * float64(r-1) / float64(r)
}

// Slice returns the parameters in the order AlphaC, BetaC, AlphaN,
// BetaN, AlphaR, BetaR, Gamma (how encodings write them). The cross-rack
// term is not part of it.
func (p Params) Slice() [7]float64 {
	v := p.slice()
	return [7]float64(v[:7])
}

// ParamsFrom is the inverse of Params.Slice; the cross-rack term is zero
// (unknown).
func ParamsFrom(v [7]float64) Params {
	var w [nParams]float64
	copy(w[:], v[:])
	return paramsFrom(w)
}

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

// SyncTimeRacks is SyncTime on n nodes spread over r racks.
func (p Params) SyncTimeRacks(r, n, k int, m float64) float64 {
	return p.SyncTime(n, k, m) + p.CrossRackTime(min(r, n))
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
	return p.IterTimeRacks(1, n, k, m, s)
}

// IterTimeRacks is IterTime on n nodes spread over r racks.
func (p Params) IterTimeRacks(r, n, k int, m float64, s int) float64 {
	acc := p.AccumTime(m)
	return float64(s)*acc + overlap(acc, p.NetworkTime(n, k), p.Gamma) + p.CrossRackTime(min(r, n))
}

// Throughput is samples per second with k replicas on n nodes, atomic batch
// m and s accumulation steps: M / IterTime with M = k*m*(s+1).
func (p Params) Throughput(n, k int, m float64, s int) float64 {
	return p.ThroughputRacks(1, n, k, m, s)
}

// ThroughputRacks is Throughput on n nodes spread over r racks.
func (p Params) ThroughputRacks(r, n, k int, m float64, s int) float64 {
	return float64(k) * m * float64(s+1) / p.IterTimeRacks(r, n, k, m, s)
}
