package trace

import "sync"

// delaunay is the piecewise-linear interpolant of step and sync times over
// the Delaunay tetrahedralisation of measured (N, K, m) points: the
// interpolation the Python artifacts use for placements they never
// measured (scipy's LinearNDInterpolator). A query is solved once, as a
// linear program (minConvex), and memoised; safe for concurrent use.
type delaunay struct {
	pts  [][3]float64
	vals [][2]float64
	lift []float64
	memo sync.Map // [3]float64 -> hullValue
}

type hullValue struct {
	step, sync float64
	ok         bool
}

func (d *delaunay) add(p [3]float64, v [2]float64) {
	d.pts = append(d.pts, p)
	d.vals = append(d.vals, v)
	d.lift = append(d.lift, p[0]*p[0]+p[1]*p[1]+p[2]*p[2])
}

// at interpolates at q; ok is false outside the convex hull of the points.
func (d *delaunay) at(q [3]float64) (step, sync float64, ok bool) {
	if v, hit := d.memo.Load(q); hit {
		hv := v.(hullValue)
		return hv.step, hv.sync, hv.ok
	}
	idx, w, ok := minConvex(d.pts, d.lift, q)
	var hv hullValue
	if ok {
		hv.ok = true
		for i, j := range idx {
			hv.step += w[i] * d.vals[j][0]
			hv.sync += w[i] * d.vals[j][1]
		}
	}
	d.memo.Store(q, hv)
	return hv.step, hv.sync, hv.ok
}
