package trace

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

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
	// siaMaxLocal are the atomic-batch caps Sia's simulator sets per GPU
	// type (applications.py); it has no yolov3 cap.
	siaMaxLocal = map[string]map[string]int{"rtx": {"deepspeech2": 57}}
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
	name string
	// typ is the GPU type the throughput traces were measured on ("" for
	// the untyped Pollux traces).
	typ       string
	limits    goodput.Limits
	maxEpochs int
	// profiledNodes is the most nodes any throughput row was measured on.
	profiledNodes int
	// oneGPU is the largest profiled atomic batch over the largest step
	// time among single-replica placements (samples per second): Sia's
	// "atomic throughput" of a GPU type, used to project a job's model to
	// a type it has not run on.
	oneGPU float64
	// maxLocalByK is the largest measured atomic batch among placements
	// of K replicas (Sia's memory cap).
	maxLocalByK map[int]int
	// hull holds the measured (N, K, m) points the way the artifacts
	// interpolate them: placements averaged by (N, K, m), then every
	// scalability row.
	hull *delaunay
	// scal are the scalability.csv rows (num_nodes, num_replicas,
	// local_bsz) for Sia's per-placement batch cap.
	scal [][3]int
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
	// stats are the validation files, shared by the GPU types.
	stats *appStats
}

// appStats is what an application's validation files say, whatever the
// GPU type: immutable once loaded.
type appStats struct {
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
	ends := a.stats.epochEnd
	if e >= len(ends) {
		return ends[len(ends)-1]
	}
	return ends[e]
}

// Type is the GPU type the throughput traces were measured on ("" for the
// untyped Pollux traces).
func (a *App) Type() string { return a.typ }

// ProfiledNodes is the most nodes any throughput measurement spans: the
// size of the physical cluster the type was profiled on.
func (a *App) ProfiledNodes() int { return a.profiledNodes }

// OneGPUThroughput is the application's throughput on one GPU of this type
// (samples per second at the largest profiled atomic batch, over the
// largest single-replica step time, as Sia computes it).
func (a *App) OneGPUThroughput() float64 { return a.oneGPU }

// MaxLocalFor is the largest atomic batch measured for a placement (per-node
// counts) as Sia's simulator bounds it: the placement's own largest
// measured batch when it was measured (up to rotation), else the largest
// one among scalability rows with at least as many nodes and replicas,
// else the application's limit.
func (a *App) MaxLocalFor(placement []int) int {
	norm := testbed.NormalizePlacement(placement)
	if c, ok := a.placements[testbed.PlacementKey(norm)]; ok {
		return int(c[len(c)-1].m)
	}
	n, k := len(norm), testbed.Replicas(norm)
	best := 0
	for _, r := range a.scal {
		if r[0] >= n && r[1] >= k {
			best = max(best, r[2])
		}
	}
	if best == 0 {
		return a.limits.MaxLocal
	}
	return best
}

// MemoryCap is the largest atomic batch measured among placements of k
// replicas, and whether any was measured (Sia's simulator caps a job's
// atomic batch with it).
func (a *App) MemoryCap(k int) (int, bool) {
	m, ok := a.maxLocalByK[k]
	return m, ok
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

var typedName = regexp.MustCompile(`^placements-([A-Za-z0-9._-]+)\.csv$`)

// Types lists the GPU types an application directory has throughput
// traces for, sorted: TYPE for every placements-TYPE.csv, and "" when the
// untyped placements.csv is there.
func Types(appDir string) ([]string, error) {
	entries, err := os.ReadDir(appDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTraces, err)
	}
	var out []string
	for _, e := range entries {
		if e.Name() == "placements.csv" {
			out = append(out, "")
		} else if m := typedName.FindStringSubmatch(e.Name()); m != nil {
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out, nil
}

// LoadTyped reads the applications apps of dir (a directory per
// application, as in Sia's artifact) on every GPU type of types: the
// result maps each type to its catalog. Every application must have
// placements-TYPE.csv and scalability-TYPE.csv for every type (the type
// "" stands for the untyped placements.csv and scalability.csv); the
// validation files are shared by the types. A missing application or
// type is reported with ErrNoTraces.
func LoadTyped(dir string, types, apps []string) (testbed.TypedCatalog, error) {
	out := testbed.TypedCatalog{}
	for _, t := range types {
		out[t] = testbed.Catalog{}
	}
	for _, name := range apps {
		sub := filepath.Join(dir, name)
		have, err := Types(sub)
		if err != nil {
			return nil, err
		}
		var stats *appStats
		for _, t := range types {
			if !slices.Contains(have, t) {
				return nil, fmt.Errorf("%w: %s has no %s (traces for %s)", ErrNoTraces, sub, placementsFile(t), describeTypes(have))
			}
			a, err := loadApp(sub, t, stats)
			if err != nil {
				return nil, err
			}
			stats = a.stats
			out[t][name] = a
		}
	}
	return out, nil
}

// describeTypes names GPU types for an error message.
func describeTypes(types []string) string {
	if len(types) == 0 {
		return "no GPU type"
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t
		if t == "" {
			names[i] = "untyped"
		}
	}
	return "GPU types " + strings.Join(names, ", ")
}

func placementsFile(typ string) string {
	if typ == "" {
		return "placements.csv"
	}
	return "placements-" + typ + ".csv"
}

func scalabilityFile(typ string) string {
	if typ == "" {
		return "scalability.csv"
	}
	return "scalability-" + typ + ".csv"
}

// LoadApp reads one application directory's untyped traces.
func LoadApp(dir string) (*App, error) { return loadApp(dir, "", nil) }

// loadApp reads one application's traces of GPU type typ, sharing stats
// (the validation files) when not nil.
func loadApp(dir, typ string, stats *appStats) (*App, error) {
	a := &App{
		name:         filepath.Base(dir),
		typ:          typ,
		placements:   map[string]curve{},
		grid:         map[[2]int]curve{},
		gridReplicas: map[int][]int{},
		maxLocalByK:  map[int]int{},
	}
	if err := a.loadThroughput(dir); err != nil {
		return nil, err
	}
	if stats == nil {
		var err error
		if stats, err = loadValidations(dir); err != nil {
			return nil, err
		}
	}
	a.stats = stats
	if err := a.setEpochs(dir); err != nil {
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
	path := filepath.Join(dir, placementsFile(a.typ))
	pt, err := readTable(path, []string{"placement", "local_bsz", "step_time", "sync_time"})
	if err != nil {
		return err
	}
	byPlacement := map[string][]sample{}
	points := map[[3]float64]*gridPoint{}
	oneM, oneStep := 0.0, 0.0
	add := func(n, k int, s sample) {
		a.profiledNodes = max(a.profiledNodes, n)
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
		k := testbed.Replicas(norm)
		add(len(norm), k, s)
		a.maxLocalByK[k] = max(a.maxLocalByK[k], int(s.m))
		if k == 1 {
			oneM, oneStep = math.Max(oneM, s.m), math.Max(oneStep, s.step)
		}
	}
	a.oneGPU = oneM / oneStep
	// The placement means, in (N, K, m) order, are the first points.
	keys := make([][3]float64, 0, len(points))
	for k := range points {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y [3]float64) int { return slices.Compare(x[:], y[:]) })
	hull := &delaunay{}
	for _, k := range keys {
		gp := points[k]
		hull.add(k, [2]float64{gp.step / gp.cnt, gp.sync / gp.cnt})
	}
	var scalPts [][3]float64
	var scalVals [][2]float64
	path = filepath.Join(dir, scalabilityFile(a.typ))
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
		a.scal = append(a.scal, [3]int{int(n), int(k), int(s.m)})
		scalPts = append(scalPts, [3]float64{n, k, s.m})
		scalVals = append(scalVals, [2]float64{s.step, s.sync})
	}
	for i := range scalPts {
		hull.add(scalPts[i], scalVals[i])
	}
	a.hull = hull
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
		return fmt.Errorf("%w: %s: no measurement of a single replica (placement 1)", ErrMalformed, filepath.Join(dir, placementsFile(a.typ)))
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

func loadValidations(dir string) (*appStats, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTraces, err)
	}
	st := &appStats{}
	for _, e := range entries {
		match := validationName.FindStringSubmatch(e.Name())
		if match == nil {
			continue
		}
		path := filepath.Join(dir, e.Name())
		batch, err := strconv.Atoi(match[1])
		if err != nil || batch < 1 {
			return nil, fmt.Errorf("%w: %s: batch size %q in the file name is not a positive integer", ErrMalformed, path, match[1])
		}
		t, err := readTable(path, []string{"progress", "iteration", "metric", "grad_sqr", "grad_var"})
		if err != nil {
			return nil, err
		}
		v := validation{batch: float64(batch)}
		prev := 0.0
		for i, row := range t.rows {
			if !(row[0] > prev) {
				return nil, fmt.Errorf("%w: %s:%d: progress %v does not increase", ErrMalformed, path, t.lines[i], row[0])
			}
			if row[1] < 0 || row[3] < 0 || row[4] < 0 {
				return nil, fmt.Errorf("%w: %s:%d: negative iteration or gradient statistic", ErrMalformed, path, t.lines[i])
			}
			prev = row[0]
			v.progress = append(v.progress, row[0])
			v.iteration = append(v.iteration, row[1])
			v.gradSqr = append(v.gradSqr, row[3])
			v.gradVar = append(v.gradVar, row[4])
		}
		st.validations = append(st.validations, v)
	}
	if len(st.validations) == 0 {
		return nil, fmt.Errorf("%w: %s: no validation-<batch>.csv file", ErrMalformed, dir)
	}
	sort.Slice(st.validations, func(i, j int) bool { return st.validations[i].batch < st.validations[j].batch })
	rows := len(st.validations[0].progress)
	for _, v := range st.validations {
		rows = min(rows, len(v.progress))
	}
	st.epochEnd = make([]float64, rows+1)
	for e := 1; e <= rows; e++ {
		end := math.Inf(1)
		for _, v := range st.validations {
			end = math.Min(end, v.progress[e-1])
		}
		st.epochEnd[e] = end
	}
	return st, nil
}

// setEpochs sets how many epochs a job trains: the application's constant
// when it has one, else every row the validation files hold.
func (a *App) setEpochs(dir string) error {
	rows := len(a.stats.epochEnd) - 1
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
	vs := a.stats.validations
	minLocal, maxLocal := math.Inf(1), 0.0
	for _, c := range a.placements {
		minLocal = math.Min(minLocal, c[0].m)
		maxLocal = math.Max(maxLocal, c[len(c)-1].m)
	}
	overrides := defaultMaxLocal
	if a.typ != "" {
		overrides = siaMaxLocal[a.typ]
	}
	if m, ok := overrides[a.name]; ok {
		maxLocal = float64(m)
	}
	a.limits = goodput.Limits{
		InitBatch:    int(vs[0].batch),
		MaxBatch:     int(vs[len(vs)-1].batch),
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
