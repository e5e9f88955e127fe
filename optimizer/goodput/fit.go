package goodput

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/optimize"
)

// ProfilePoint is one profiled configuration of a job and the times measured
// on it.
type ProfilePoint struct {
	// Nodes and Replicas are N and K.
	Nodes    int `json:"nodes"`
	Replicas int `json:"replicas"`
	// LocalBatch is the atomic per-GPU batch m.
	LocalBatch int `json:"local_bsz"`
	// AccumTime is the time of one accumulation micro-step (a step without
	// synchronisation): step time minus sync time.
	AccumTime float64 `json:"accum_time"`
	// StepTime is the time of one full synchronised step.
	StepTime float64 `json:"step_time"`
	// Racks is how many racks the nodes span; 0 and 1 both mean one rack.
	Racks int `json:"racks,omitempty"`
}

// Validate reports whether the point can be fitted on.
func (p ProfilePoint) Validate() error {
	switch {
	case p.Nodes < 1 || p.Replicas < p.Nodes:
		return fmt.Errorf("%w: %d replicas on %d nodes", ErrBadPoint, p.Replicas, p.Nodes)
	case p.Racks < 0 || p.Racks > p.Nodes:
		return fmt.Errorf("%w: %d nodes in %d racks", ErrBadPoint, p.Nodes, p.Racks)
	case p.LocalBatch <= 0:
		return fmt.Errorf("%w: local batch %d", ErrBadPoint, p.LocalBatch)
	case !(p.AccumTime > 0) || math.IsInf(p.AccumTime, 0):
		return fmt.Errorf("%w: accumulation time %v", ErrBadPoint, p.AccumTime)
	case !(p.StepTime > 0) || math.IsInf(p.StepTime, 0):
		return fmt.Errorf("%w: step time %v", ErrBadPoint, p.StepTime)
	}
	return nil
}

// Bounds and starting point of the fit.
const (
	lowerBound = 1e-8
	gammaMin   = 1.0
	gammaMax   = 10.0
)

var fitStart = [nParams]float64{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001, 0.1}

// rmseEps smooths the fit's RMSE terms at an exact fit; it moves the
// loss by at most 2 rmseEps.
const rmseEps = 1e-4

// gammaStarts are the starting gammas of the fit's restarts.
var gammaStarts = [...]float64{1.001, 2, 5}

// Parameter indices.
const (
	iAlphaC = iota
	iBetaC
	iAlphaN
	iBetaN
	iAlphaR
	iBetaR
	iGamma
	iAlphaX
	nParams
)

// Fit fits the throughput model to profiled points: it minimises the RMSE
// of log accumulation time plus the RMSE of log step time, with a small
// pull of gamma towards 1 and of the retrogression terms towards 0.
// Parameters the points cannot identify are pinned (see the package
// specification): one distinct local batch pins alpha_c; no multi-node
// point within one rack pins the inter-node terms (raised after the fit to
// 1.1 times the intra-node ones); no single-node multi-GPU point pins the
// intra-node terms; no point with K > 2 pins both retrogression terms.
//
// The cross-rack term is fitted only from points spanning racks; without
// any it stays zero (unknown), and the fit is exactly the seven-parameter
// one. Points across racks identify it beside the inter-node terms, so
// they do not count as multi-node points within one rack.
func Fit(points []ProfilePoint) (Params, error) {
	if len(points) == 0 {
		return Params{}, ErrNoPoints
	}
	for i, p := range points {
		if err := p.Validate(); err != nil {
			return Params{}, fmt.Errorf("point %d: %w", i, err)
		}
	}
	pr := newFitProblem(points)
	best := pr.decode(pr.encode(fitStart))
	bestF := pr.objective(best)
	if len(pr.free) > 0 {
		// The squashing map of gamma is flat near its bounds, so a start
		// at gamma ~ 1 alone can stall there: also start from the interior.
		for _, g := range gammaStarts {
			start := fitStart
			start[iGamma] = g
			res, _ := optimize.Minimize(optimize.Problem{Func: pr.f, Grad: pr.grad},
				pr.encode(start), &optimize.Settings{
					GradientThreshold: 1e-6,
					Converger:         &optimize.FunctionConverge{Absolute: 1e-12, Relative: 1e-10, Iterations: 20},
					MajorIterations:   1000,
				}, &optimize.LBFGS{})
			// A line-search failure after convergence still leaves a
			// usable point: keep whatever improves on the best so far.
			if res == nil {
				continue
			}
			if cand := pr.decode(res.X); finite(cand) {
				if f := pr.objective(cand); f < bestF {
					best, bestF = cand, f
				}
			}
		}
	}
	if math.IsNaN(bestF) || math.IsInf(bestF, 0) {
		return Params{}, fmt.Errorf("%w: fit diverged", ErrBadPoint)
	}
	if !pr.multiNode {
		best[iAlphaN] = math.Max(best[iAlphaN], 1.1*best[iAlphaR])
		best[iBetaN] = math.Max(best[iBetaN], 1.1*best[iBetaR])
	}
	if !pr.crossRack {
		best[iAlphaX] = 0
	}
	return paramsFrom(best), nil
}

// Refit fits the throughput model to points starting from prev, the
// parameters of an earlier fit (typically on fewer or older points): one
// L-BFGS run from there instead of Fit's three cold starts, which is what
// a job's model needs when a few measurements were added. The result is
// never worse on points than prev itself. Pinning follows Fit.
func Refit(points []ProfilePoint, prev Params) (Params, error) {
	if len(points) == 0 {
		return Params{}, ErrNoPoints
	}
	for i, p := range points {
		if err := p.Validate(); err != nil {
			return Params{}, fmt.Errorf("point %d: %w", i, err)
		}
	}
	if err := prev.Validate(); err != nil {
		return Fit(points)
	}
	pr := newFitProblem(points)
	start := pr.fixed
	for _, i := range pr.free {
		v := prev.slice()[i]
		switch {
		case i == iAlphaX && !(v > 0):
			// A term unknown before: from the floor its coordinate's
			// gradient vanishes, so it starts where Fit starts it.
			v = fitStart[i]
		case i == iGamma:
			v = math.Min(math.Max(v, gammaMin+1e-6), gammaMax-1e-6)
		default:
			v = math.Max(v, 2*lowerBound)
		}
		start[i] = v
	}
	best := pr.decode(pr.encode(start))
	bestF := pr.objective(best)
	if len(pr.free) > 0 {
		res, _ := optimize.Minimize(optimize.Problem{Func: pr.f, Grad: pr.grad}, pr.encode(start), &optimize.Settings{
			GradientThreshold: 1e-6,
			Converger:         &optimize.FunctionConverge{Absolute: 1e-12, Relative: 1e-10, Iterations: 20},
			MajorIterations:   1000,
		}, &optimize.LBFGS{})
		if res != nil {
			if cand := pr.decode(res.X); finite(cand) {
				if f := pr.objective(cand); f < bestF {
					best, bestF = cand, f
				}
			}
		}
	}
	if math.IsNaN(bestF) || math.IsInf(bestF, 0) {
		return Fit(points)
	}
	if !pr.multiNode {
		best[iAlphaN] = math.Max(best[iAlphaN], 1.1*best[iAlphaR])
		best[iBetaN] = math.Max(best[iBetaN], 1.1*best[iBetaR])
	}
	if !pr.crossRack {
		best[iAlphaX] = 0
	}
	return paramsFrom(best), nil
}

func finite(v [nParams]float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// fitProblem is the objective of Fit in unconstrained coordinates: free
// positive parameters are lowerBound + exp(u), gamma is
// gammaMin + (gammaMax-gammaMin) * sigmoid(u).
type fitProblem struct {
	points    []ProfilePoint
	logAcc    []float64
	logStep   []float64
	fixed     [nParams]float64
	free      []int // indices of the free parameters, in order
	multiNode bool
	// crossRack reports points across racks.
	crossRack bool
}

func newFitProblem(points []ProfilePoint) *fitProblem {
	pr := &fitProblem{points: points, fixed: fitStart}
	pr.logAcc = make([]float64, len(points))
	pr.logStep = make([]float64, len(points))
	var pinned [nParams]bool
	distinctM := map[int]bool{}
	singleNodeMulti, bigK := false, false
	meanAcc := 0.0
	for i, p := range points {
		pr.logAcc[i] = math.Log(p.AccumTime)
		pr.logStep[i] = math.Log(p.StepTime)
		distinctM[p.LocalBatch] = true
		meanAcc += p.AccumTime
		switch {
		case p.Racks > 1 && p.Nodes > 1:
			pr.crossRack = true
		case p.Nodes > 1:
			pr.multiNode = true
		}
		if p.Nodes == 1 && p.Replicas > 1 {
			singleNodeMulti = true
		}
		if p.Replicas > 2 {
			bigK = true
		}
	}
	meanAcc /= float64(len(points))
	if len(distinctM) == 1 {
		pr.fixed[iAlphaC], pinned[iAlphaC] = meanAcc/2, true
	}
	if !pr.multiNode {
		pr.fixed[iAlphaN], pinned[iAlphaN] = lowerBound, true
		pr.fixed[iBetaN], pinned[iBetaN] = lowerBound, true
	}
	if !singleNodeMulti {
		pr.fixed[iAlphaR], pinned[iAlphaR] = lowerBound, true
		pr.fixed[iBetaR], pinned[iBetaR] = lowerBound, true
	}
	if !bigK {
		pr.fixed[iBetaN], pinned[iBetaN] = lowerBound, true
		pr.fixed[iBetaR], pinned[iBetaR] = lowerBound, true
	}
	if !pr.crossRack {
		pinned[iAlphaX] = true
	}
	for i := range pinned {
		if !pinned[i] {
			pr.free = append(pr.free, i)
		}
	}
	return pr
}

func sigmoid(u float64) float64 { return 1 / (1 + math.Exp(-u)) }

func (pr *fitProblem) encode(v [nParams]float64) []float64 {
	x := make([]float64, len(pr.free))
	for j, i := range pr.free {
		if i == iGamma {
			s := (v[i] - gammaMin) / (gammaMax - gammaMin)
			x[j] = math.Log(s / (1 - s))
		} else {
			x[j] = math.Log(v[i] - lowerBound)
		}
	}
	return x
}

func (pr *fitProblem) decode(x []float64) [nParams]float64 {
	v := pr.fixed
	for j, i := range pr.free {
		if i == iGamma {
			v[i] = gammaMin + (gammaMax-gammaMin)*sigmoid(x[j])
		} else {
			v[i] = lowerBound + math.Exp(x[j])
		}
	}
	return v
}

func (pr *fitProblem) f(x []float64) float64 {
	return pr.objective(pr.decode(x))
}

func (pr *fitProblem) grad(g, x []float64) {
	v := pr.decode(x)
	var dv [nParams]float64
	pr.objectiveGrad(v, &dv)
	for j, i := range pr.free {
		if i == iGamma {
			s := sigmoid(x[j])
			g[j] = dv[i] * (gammaMax - gammaMin) * s * (1 - s)
		} else {
			g[j] = dv[i] * math.Exp(x[j])
		}
	}
}

// objective is the fit loss at parameters v.
func (pr *fitProblem) objective(v [nParams]float64) float64 {
	return pr.objectiveGrad(v, nil)
}

// objectiveGrad returns the loss at v and, when dv is not nil, stores its
// gradient with respect to v there.
func (pr *fitProblem) objectiveGrad(v [nParams]float64, dv *[nParams]float64) float64 {
	gamma := v[iGamma]
	n := float64(len(pr.points))
	var sse1, sse2 float64
	// Accumulated d(sse)/dv, to be scaled by d(rmse)/d(sse) at the end.
	var d1, d2 [nParams]float64
	for i, p := range pr.points {
		m := float64(p.LocalBatch)
		acc := v[iAlphaC] + v[iBetaC]*m
		ia, ib := -1, -1
		switch {
		case p.Nodes > 1:
			ia, ib = iAlphaN, iBetaN
		case p.Replicas > 1:
			ia, ib = iAlphaR, iBetaR
		}
		retro := math.Max(float64(p.Replicas-2), tiny)
		net := tiny + tiny*retro
		if ia >= 0 {
			net = v[ia] + v[ib]*retro
		}
		// log T_sync = log(acc^g + net^g) / g, computed stably.
		la, ln := math.Log(acc), math.Log(net)
		mx := math.Max(gamma*la, gamma*ln)
		wa, wn := math.Exp(gamma*la-mx), math.Exp(gamma*ln-mx)
		logS := mx + math.Log(wa+wn)
		logSync := logS / gamma
		// Across racks the step is T_sync + alpha_x * share: its log
		// derivative is the in-rack one times T_sync / step.
		scale, share, step := 1.0, 0.0, 0.0
		if p.Racks > 1 && p.Nodes > 1 {
			sync := math.Exp(logSync)
			share = RackShare(min(p.Racks, p.Nodes))
			step = sync + v[iAlphaX]*share
			scale = sync / step
			logSync = math.Log(step)
		}
		r1 := la - pr.logAcc[i]
		r2 := logSync - pr.logStep[i]
		sse1 += r1 * r1
		sse2 += r2 * r2
		if dv == nil {
			continue
		}
		// Residual 1 depends on alpha_c, beta_c through acc.
		d1[iAlphaC] += 2 * r1 / acc
		d1[iBetaC] += 2 * r1 / acc * m
		// Residual 2: d logSync / d acc = (wa/(wa+wn)) / acc, likewise net.
		fa, fn := wa/(wa+wn), wn/(wa+wn)
		dAcc := 2 * r2 * scale * fa / acc
		d2[iAlphaC] += dAcc
		d2[iBetaC] += dAcc * m
		if ia >= 0 {
			dNet := 2 * r2 * scale * fn / net
			d2[ia] += dNet
			d2[ib] += dNet * retro
		}
		// logSync = logS/g with d logS/d g = fa*la + fn*ln.
		d2[iGamma] += 2 * r2 * scale * ((fa*la+fn*ln)/gamma - logS/(gamma*gamma))
		if share > 0 {
			d2[iAlphaX] += 2 * r2 * share / step
		}
	}
	// RMSE smoothed at an exact fit (sqrt(mse + eps^2)): the plain RMSE
	// has a kink where every residual of a term is 0 (points of one local
	// batch have a whole line of exact accumulation fits), in whose
	// valley L-BFGS's line search fails.
	rmse1, rmse2 := math.Sqrt(sse1/n+rmseEps*rmseEps), math.Sqrt(sse2/n+rmseEps*rmseEps)
	bn, br := v[iBetaN]/v[iAlphaN], v[iBetaR]/v[iAlphaR]
	loss := rmse1 + rmse2 + 1e-3*(gamma-1)*(gamma-1) + 1e-2*(bn*bn+br*br)
	if dv == nil {
		return loss
	}
	// d rmse / d sse = 1 / (2 n rmse); guard the exact-fit case.
	k1, k2 := 0.0, 0.0
	if rmse1 > 0 {
		k1 = 1 / (2 * n * rmse1)
	}
	if rmse2 > 0 {
		k2 = 1 / (2 * n * rmse2)
	}
	for i := range dv {
		dv[i] = k1*d1[i] + k2*d2[i]
	}
	dv[iGamma] += 2e-3 * (gamma - 1)
	dv[iBetaN] += 2e-2 * bn / v[iAlphaN]
	dv[iAlphaN] -= 2e-2 * bn * bn / v[iAlphaN]
	dv[iBetaR] += 2e-2 * br / v[iAlphaR]
	dv[iAlphaR] -= 2e-2 * br * br / v[iAlphaR]
	return loss
}
