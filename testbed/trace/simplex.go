package trace

import "math"

// lpTol is the pivoting tolerance of the simplex method, relative to the
// magnitudes involved.
const lpTol = 1e-9

// minConvex solves the linear program
//
//	minimise sum_i lambda_i * cost[i]
//	subject to sum_i lambda_i * pts[i] = q, sum_i lambda_i = 1, lambda >= 0
//
// with a dense two-phase simplex method and Bland's rule, returning the
// nonzero weights of an optimal vertex (ok false: q is outside the hull).
// With cost[i] = |pts[i]|^2 they are q's Delaunay barycentric coordinates,
// as scipy's LinearNDInterpolator uses (docs/fidelity.md).
func minConvex(pts [][3]float64, cost []float64, q [3]float64) (idx []int, w []float64, ok bool) {
	const rows = 4
	n := len(pts)
	if n == 0 {
		return nil, nil, false
	}
	// Tableau columns: n point weights, rows artificial variables, then
	// the right-hand side.
	cols := n + rows + 1
	rhs := cols - 1
	t := make([][]float64, rows)
	b := [rows]float64{q[0], q[1], q[2], 1}
	scale := 1.0
	for r := 0; r < rows; r++ {
		t[r] = make([]float64, cols)
		for i := 0; i < n; i++ {
			if r < 3 {
				t[r][i] = pts[i][r]
			} else {
				t[r][i] = 1
			}
			scale = math.Max(scale, math.Abs(t[r][i]))
		}
		t[r][n+r] = 1
		t[r][rhs] = b[r]
		if b[r] < 0 {
			for c := range t[r] {
				t[r][c] = -t[r][c]
			}
		}
	}
	basis := [rows]int{n, n + 1, n + 2, n + 3}
	tol := lpTol * scale
	// Phase 1 minimises the artificials, phase 2 the cost; artificials
	// never re-enter in phase 2.
	phase1 := func(c int) float64 {
		if c >= n && c < n+rows {
			return 1
		}
		return 0
	}
	phase2 := func(c int) float64 {
		if c < n {
			return cost[c]
		}
		return 0
	}
	run := func(objective func(int) float64, allowed int) bool {
		for iter := 0; iter < 100*(n+rows); iter++ {
			// Bland's rule: the lowest-index column whose reduced cost
			// c_j - c_B' B^-1 A_j (read off the tableau) improves and
			// that can pivot; the lowest basis index among tied rows.
			pivoted := false
			for j := 0; j < allowed && !pivoted; j++ {
				if isBasic(basis[:], j) {
					continue
				}
				d := objective(j)
				for r := 0; r < rows; r++ {
					d -= objective(basis[r]) * t[r][j]
				}
				if d >= -lpTol*math.Max(1, math.Abs(objective(j))) {
					continue
				}
				leave := -1
				best := math.Inf(1)
				for r := 0; r < rows; r++ {
					if t[r][j] <= tol {
						continue
					}
					ratio := t[r][rhs] / t[r][j]
					slack := 1e-12 * math.Max(1, math.Abs(best))
					if leave < 0 || ratio < best-slack || (ratio <= best+slack && basis[r] < basis[leave]) {
						best, leave = ratio, r
					}
				}
				if leave < 0 {
					continue
				}
				pivot(t, leave, j)
				basis[leave] = j
				pivoted = true
			}
			if !pivoted {
				return true
			}
		}
		return false
	}
	if !run(phase1, n+rows) {
		return nil, nil, false
	}
	infeas := 0.0
	for r := 0; r < rows; r++ {
		if basis[r] >= n {
			infeas += t[r][rhs]
		}
	}
	if infeas > 1e-7*math.Max(1, scale) {
		return nil, nil, false
	}
	// Drive remaining (zero) artificials out of the basis where possible.
	for r := 0; r < rows; r++ {
		if basis[r] < n {
			continue
		}
		for j := 0; j < n; j++ {
			if !isBasic(basis[:], j) && math.Abs(t[r][j]) > tol {
				pivot(t, r, j)
				basis[r] = j
				break
			}
		}
	}
	if !run(phase2, n) {
		return nil, nil, false
	}
	for r := 0; r < rows; r++ {
		if basis[r] < n && t[r][rhs] > 1e-12 {
			idx = append(idx, basis[r])
			w = append(w, t[r][rhs])
		}
	}
	sum := 0.0
	for _, v := range w {
		sum += v
	}
	if len(w) == 0 || math.Abs(sum-1) > 1e-6 {
		return nil, nil, false
	}
	for i := range w {
		w[i] /= sum
	}
	return idx, w, true
}

func isBasic(basis []int, j int) bool {
	for _, b := range basis {
		if b == j {
			return true
		}
	}
	return false
}

// pivot makes column c basic in row r.
func pivot(t [][]float64, r, c int) {
	p := t[r][c]
	row := t[r]
	for k := range row {
		row[k] /= p
	}
	for i := range t {
		if i == r {
			continue
		}
		f := t[i][c]
		if f == 0 {
			continue
		}
		for k := range t[i] {
			t[i][k] -= f * row[k]
		}
		t[i][c] = 0
	}
}
