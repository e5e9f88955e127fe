package trace

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"pollux/optimizer/goodput"
	"pollux/testbed"
)

// Defaults are the per-application constants of the reference testbed that
// the trace files do not carry: epochs to train and the atomic-batch cap
// where it is below the largest profiled one.
var (
	defaultEpochs = map[string]int{
		"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50,
	}
	defaultMaxLocal = map[string]int{"yolov3": 8}
)

// sample is one measured (atomic batch, step time, sync time) point.
type sample struct{ m, step, sync float64 }

// curve is the samples of one placement (or one (N, K) pair), sorted by m,
// one per distinct m.
type curve []sample

// at interpolates the curve linearly in m, flat outside the measured range.
func (c curve) at(m float64) (step, sync float64) {
	if m <= c[0].m {
		return c[0].step, c[0].sync
	}
	last := c[len(c)-1]
	if m >= last.m {
		return last.step, last.sync
	}
	i := sort.Search(len(c), func(i int) bool { return c[i].m >= m })
	lo, hi := c[i-1], c[i]
	w := (m - lo.m) / (hi.m - lo.m)
	return lo.step + w*(hi.step-lo.step), lo.sync + w*(hi.sync-lo.sync)
}

// validation is the per-epoch record of one training run at one batch size.
type validation struct {
	batch     float64
	progress  []float64
	iteration []float64
	gradSqr   []float64
	gradVar   []float64
}

// App is one application loaded from its trace directory. It implements
// testbed.Application and is immutable after Load.
type App struct {
	name      string
	limits    goodput.Limits
	maxEpochs int
	// placements maps testbed.PlacementKey of a measured placement to its
	// curve.
	placements map[string]curve
	// grid maps (N, K) to the curve averaged over placements with N nodes
	// and K replicas, plus scalability.csv.
	grid map[[2]int]curve
	// gridNodes lists the N of grid, sorted; gridReplicas[N] the K
	// measured with N nodes, sorted.
	gridNodes    []int
	gridReplicas map[int][]int
	// validations sorted by batch.
	validations []validation
	// epochEnd[e] is the progress at which epoch e ends (epochEnd[0] = 0).
	epochEnd []float64
}

var _ testbed.Application = (*App)(nil)

// Name implements testbed.Application.
func (a *App) Name() string { return a.name }

// Limits implements testbed.Application.
func (a *App) Limits() goodput.Limits { return a.limits }

// MaxEpochs implements testbed.Application.
func (a *App) MaxEpochs() int { return a.maxEpochs }

// EpochEnd implements testbed.Application.
func (a *App) EpochEnd(e int) float64 {
	if e <= 0 {
		return 0
	}
	if e >= len(a.epochEnd) {
		return a.epochEnd[len(a.epochEnd)-1]
	}
	return a.epochEnd[e]
}

var validationName = regexp.MustCompile(`^validation-([0-9]+)\.csv$`)

// Load reads every application under dir: each subdirectory holding a
// placements.csv is one application, named after the subdirectory.
func Load(dir string) (testbed.Catalog, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTraces, err)
	}
	cat := testbed.Catalog{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(sub, "placements.csv")); err != nil {
			continue
		}
		app, err := LoadApp(sub)
		if err != nil {
			return nil, err
		}
		cat[app.Name()] = app
	}
	if len(cat) == 0 {
		return nil, fmt.Errorf("%w: %s holds no application directory with a placements.csv", ErrNoTraces, dir)
	}
	return cat, nil
}

// LoadApp reads one application directory.
func LoadApp(dir string) (*App, error) {
	a := &App{
		name:         filepath.Base(dir),
		placements:   map[string]curve{},
		grid:         map[[2]int]curve{},
		gridReplicas: map[int][]int{},
	}
	if err := a.loadThroughput(dir); err != nil {
		return nil, err
	}
	if err := a.loadValidations(dir); err != nil {
		return nil, err
	}
	return a, a.setLimits(dir)
}

func readTable(path string, header []string) (*table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	defer f.Close()
	return decodeTable(f, path, header)
}

// gridPoint accumulates the mean of samples at one (N, K, m).
type gridPoint struct {
	n, k               int
	m, step, sync, cnt float64
}

func (a *App) loadThroughput(dir string) error {
	path := filepath.Join(dir, "placements.csv")
	pt, err := readTable(path, []string{"placement", "local_bsz", "step_time", "sync_time"})
	if err != nil {
		return err
	}
	byPlacement := map[string][]sample{}
	points := map[[3]float64]*gridPoint{}
	add := func(n, k int, s sample) {
		key := [3]float64{float64(n), float64(k), s.m}
		gp := points[key]
		if gp == nil {
			gp = &gridPoint{n: n, k: k, m: s.m}
			points[key] = gp
		}
		gp.step += s.step
		gp.sync += s.sync
		gp.cnt++
	}
	for i, row := range pt.rows {
		counts, err := parsePlacement(row[0])
		if err != nil {
			return fmt.Errorf("%w: %s:%d: %v", ErrMalformed, path, pt.lines[i], err)
		}
		s, err := checkSample(row[1], row[2], row[3])
		if err != nil {
			return fmt.Errorf("%w: %s:%d: %v", ErrMalformed, path, pt.lines[i], err)
		}
		norm := testbed.NormalizePlacement(counts)
		key := testbed.PlacementKey(norm)
		byPlacement[key] = append(byPlacement[key], s)
		add(len(norm), testbed.Replicas(norm), s)
	}
	path = filepath.Join(dir, "scalability.csv")
	st, err := readTable(path, []string{"num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"})
	if err != nil {
		return err
	}
	for i, row := range st.rows {
		n, k := row[0], row[1]
		if n != math.Trunc(n) || k != math.Trunc(k) || n < 1 || k < n || k > 1e6 {
			return fmt.Errorf("%w: %s:%d: %v replicas on %v nodes", ErrMalformed, path, st.lines[i], k, n)
		}
		s, err := checkSample(row[2], row[3], row[4])
		if err != nil {
			return fmt.Errorf("%w: %s:%d: %v", ErrMalformed, path, st.lines[i], err)
		}
		add(int(n), int(k), s)
	}
	for key, samples := range byPlacement {
		a.placements[key] = makeCurve(samples)
	}
	byNK := map[[2]int][]sample{}
	for _, gp := range points {
		nk := [2]int{gp.n, gp.k}
		byNK[nk] = append(byNK[nk], sample{gp.m, gp.step / gp.cnt, gp.sync / gp.cnt})
	}
	for nk, samples := range byNK {
		a.grid[nk] = makeCurve(samples)
		if len(a.gridReplicas[nk[0]]) == 0 {
			a.gridNodes = append(a.gridNodes, nk[0])
		}
		a.gridReplicas[nk[0]] = append(a.gridReplicas[nk[0]], nk[1])
	}
	sort.Ints(a.gridNodes)
	for _, ks := range a.gridReplicas {
		sort.Ints(ks)
	}
	if _, ok := a.placements["1"]; !ok {
		return fmt.Errorf("%w: %s: no measurement of a single replica (placement 1)", ErrMalformed, filepath.Join(dir, "placements.csv"))
	}
	return nil
}

// parsePlacement turns the digits of the placement column into per-node
// replica counts.
func parsePlacement(v float64) ([]int, error) {
	if v != math.Trunc(v) || v < 1 || v > 1e15 {
		return nil, fmt.Errorf("placement %v is not a string of digits 1-9", v)
	}
	digits := strconv.FormatInt(int64(v), 10)
	counts := make([]int, len(digits))
	for i, d := range digits {
		if d == '0' {
			return nil, fmt.Errorf("placement %s has a node with 0 replicas", digits)
		}
		counts[i] = int(d - '0')
	}
	return counts, nil
}

func checkSample(m, step, sync float64) (sample, error) {
	switch {
	case !(m >= 1):
		return sample{}, fmt.Errorf("local_bsz %v below 1", m)
	case !(step > 0):
		return sample{}, fmt.Errorf("step_time %v not positive", step)
	case !(sync >= 0) || sync >= step:
		return sample{}, fmt.Errorf("sync_time %v outside [0, step_time %v)", sync, step)
	}
	return sample{m, step, sync}, nil
}

// makeCurve sorts samples by m and averages duplicates.
func makeCurve(samples []sample) curve {
	sort.Slice(samples, func(i, j int) bool { return samples[i].m < samples[j].m })
	var c curve
	cnt := 0.0
	for _, s := range samples {
		if len(c) > 0 && c[len(c)-1].m == s.m {
			last := &c[len(c)-1]
			last.step = (last.step*cnt + s.step) / (cnt + 1)
			last.sync = (last.sync*cnt + s.sync) / (cnt + 1)
			cnt++
			continue
		}
		c = append(c, s)
		cnt = 1
	}
	return c
}

func (a *App) loadValidations(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoTraces, err)
	}
	for _, e := range entries {
		match := validationName.FindStringSubmatch(e.Name())
		if match == nil {
			continue
		}
		path := filepath.Join(dir, e.Name())
		batch, err := strconv.Atoi(match[1])
		if err != nil || batch < 1 {
			return fmt.Errorf("%w: %s: batch size %q in the file name is not a positive integer", ErrMalformed, path, match[1])
		}
		t, err := readTable(path, []string{"progress", "iteration", "metric", "grad_sqr", "grad_var"})
		if err != nil {
			return err
		}
		v := validation{batch: float64(batch)}
		prev := 0.0
		for i, row := range t.rows {
			if !(row[0] > prev) {
				return fmt.Errorf("%w: %s:%d: progress %v does not increase", ErrMalformed, path, t.lines[i], row[0])
			}
			if row[1] < 0 || row[3] < 0 || row[4] < 0 {
				return fmt.Errorf("%w: %s:%d: negative iteration or gradient statistic", ErrMalformed, path, t.lines[i])
			}
			prev = row[0]
			v.progress = append(v.progress, row[0])
			v.iteration = append(v.iteration, row[1])
			v.gradSqr = append(v.gradSqr, row[3])
			v.gradVar = append(v.gradVar, row[4])
		}
		a.validations = append(a.validations, v)
	}
	if len(a.validations) == 0 {
		return fmt.Errorf("%w: %s: no validation-<batch>.csv file", ErrMalformed, dir)
	}
	sort.Slice(a.validations, func(i, j int) bool { return a.validations[i].batch < a.validations[j].batch })
	rows := len(a.validations[0].progress)
	for _, v := range a.validations {
		rows = min(rows, len(v.progress))
	}
	a.epochEnd = make([]float64, rows+1)
	for e := 1; e <= rows; e++ {
		end := math.Inf(1)
		for _, v := range a.validations {
			end = math.Min(end, v.progress[e-1])
		}
		a.epochEnd[e] = end
	}
	a.maxEpochs = rows
	if e, ok := defaultEpochs[a.name]; ok {
		if e > rows {
			return fmt.Errorf("%w: %s: %d epochs to train but validation files hold only %d rows", ErrMalformed, dir, e, rows)
		}
		a.maxEpochs = e
	}
	return nil
}

func (a *App) setLimits(dir string) error {
	minLocal, maxLocal := math.Inf(1), 0.0
	for _, c := range a.placements {
		minLocal = math.Min(minLocal, c[0].m)
		maxLocal = math.Max(maxLocal, c[len(c)-1].m)
	}
	if m, ok := defaultMaxLocal[a.name]; ok {
		maxLocal = float64(m)
	}
	a.limits = goodput.Limits{
		InitBatch:    int(a.validations[0].batch),
		MaxBatch:     int(a.validations[len(a.validations)-1].batch),
		MinLocal:     int(minLocal),
		MaxLocal:     int(maxLocal),
		Accumulation: true,
	}
	if err := a.limits.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrMalformed, dir, err)
	}
	if a.limits.MaxBatch < a.limits.MinLocal {
		return fmt.Errorf("%w: %s: largest batch %d below smallest local batch %d", ErrMalformed, dir, a.limits.MaxBatch, a.limits.MinLocal)
	}
	return nil
}
