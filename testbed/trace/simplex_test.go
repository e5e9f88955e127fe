package trace

import (
	"math"
	"math/rand/v2"
	"testing"
)

// On points in general position the Delaunay interpolant is unique: it
// reproduces a linear function exactly, returns a measured value at a
// measured point and refuses points outside the hull.
func TestMinConvexLinearAndHull(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	d := &delaunay{}
	f := func(p [3]float64) float64 { return 2 + 0.5*p[0] - 0.25*p[1] + 0.125*p[2] }
	for i := 0; i < 60; i++ {
		p := [3]float64{rng.Float64() * 10, rng.Float64() * 10, rng.Float64() * 10}
		d.add(p, [2]float64{f(p), 1})
	}
	// The cube corners bound the hull.
	for _, c := range [][3]float64{{0, 0, 0}, {10, 0, 0}, {0, 10, 0}, {0, 0, 10}, {10, 10, 0}, {10, 0, 10}, {0, 10, 10}, {10, 10, 10}} {
		d.add(c, [2]float64{f(c), 1})
	}
	for i := 0; i < 200; i++ {
		q := [3]float64{rng.Float64() * 10, rng.Float64() * 10, rng.Float64() * 10}
		step, sync, ok := d.at(q)
		if !ok || math.Abs(step-f(q)) > 1e-9 || math.Abs(sync-1) > 1e-9 {
			t.Fatalf("q %v: %v %v %v, want %v 1 true", q, step, sync, ok, f(q))
		}
	}
	if step, _, ok := d.at(d.pts[3]); !ok || math.Abs(step-d.vals[3][0]) > 1e-12 {
		t.Errorf("measured point: %v %v", step, ok)
	}
	if _, _, ok := d.at([3]float64{11, 5, 5}); ok {
		t.Error("a point outside the hull was interpolated")
	}
}

// On random points (general position) the interpolant equals the
// barycentric interpolation in the simplex found by brute force: the one
// containing q whose circumsphere holds no other point.
func TestMinConvexPicksDelaunaySimplex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := &delaunay{}
	for i := 0; i < 12; i++ {
		p := [3]float64{rng.Float64(), rng.Float64(), rng.Float64()}
		d.add(p, [2]float64{rng.Float64(), 0})
	}
	checked := 0
	for trial := 0; trial < 50; trial++ {
		q := [3]float64{0.3 + 0.4*rng.Float64(), 0.3 + 0.4*rng.Float64(), 0.3 + 0.4*rng.Float64()}
		want, found := bruteDelaunay(d, q)
		got, _, ok := d.at(q)
		if !found {
			if ok {
				t.Errorf("q %v outside every Delaunay simplex but interpolated", q)
			}
			continue
		}
		checked++
		if !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("q %v: %v %v, want %v", q, got, ok, want)
		}
	}
	if checked < 20 {
		t.Errorf("only %d queries inside the hull", checked)
	}
}

// bruteDelaunay interpolates at q in the Delaunay simplex containing it.
func bruteDelaunay(d *delaunay, q [3]float64) (float64, bool) {
	n := len(d.pts)
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			for c := b + 1; c < n; c++ {
				for e := c + 1; e < n; e++ {
					s := [4]int{a, b, c, e}
					w, ok := barycentric(d, s, q)
					if !ok || !emptySphere(d, s) {
						continue
					}
					v := 0.0
					for i, j := range s {
						v += w[i] * d.vals[j][0]
					}
					return v, true
				}
			}
		}
	}
	return 0, false
}

func barycentric(d *delaunay, s [4]int, q [3]float64) ([4]float64, bool) {
	// Solve [p1-p0 p2-p0 p3-p0] x = q - p0 by Cramer's rule.
	p0 := d.pts[s[0]]
	var m [3][3]float64
	for c := 0; c < 3; c++ {
		for r := 0; r < 3; r++ {
			m[r][c] = d.pts[s[c+1]][r] - p0[r]
		}
	}
	det := det3(m)
	if math.Abs(det) < 1e-12 {
		return [4]float64{}, false
	}
	rhs := [3]float64{q[0] - p0[0], q[1] - p0[1], q[2] - p0[2]}
	var w [4]float64
	sum := 0.0
	for c := 0; c < 3; c++ {
		mc := m
		for r := 0; r < 3; r++ {
			mc[r][c] = rhs[r]
		}
		w[c+1] = det3(mc) / det
		sum += w[c+1]
	}
	w[0] = 1 - sum
	for _, v := range w {
		if v < -1e-12 {
			return w, false
		}
	}
	return w, true
}

func emptySphere(d *delaunay, s [4]int) bool {
	// Centre c solves 2(p_i - p_0).c = |p_i|^2 - |p_0|^2.
	p0 := d.pts[s[0]]
	var m [3][3]float64
	var rhs [3]float64
	for i := 1; i < 4; i++ {
		p := d.pts[s[i]]
		for k := 0; k < 3; k++ {
			m[i-1][k] = 2 * (p[k] - p0[k])
		}
		rhs[i-1] = d.lift[s[i]] - d.lift[s[0]]
	}
	det := det3(m)
	var c [3]float64
	for k := 0; k < 3; k++ {
		mk := m
		for r := 0; r < 3; r++ {
			mk[r][k] = rhs[r]
		}
		c[k] = det3(mk) / det
	}
	r2 := dist2(p0, c)
	for j := range d.pts {
		if j != s[0] && j != s[1] && j != s[2] && j != s[3] && dist2(d.pts[j], c) < r2*(1-1e-9) {
			return false
		}
	}
	return true
}

func det3(m [3][3]float64) float64 {
	return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) - m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) + m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
}

func dist2(a, b [3]float64) float64 {
	return (a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2])
}
