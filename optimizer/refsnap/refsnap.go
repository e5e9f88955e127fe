package refsnap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"pollux/optimizer"
	"pollux/optimizer/goodput"
)

// Sentinel errors.
var (
	// ErrFormat is returned for a file that is not a valid snapshot or
	// reference file (bad JSON, missing or malformed fields).
	ErrFormat = errors.New("refsnap: bad format")
	// ErrNoSnapshots is returned by LoadDir for a directory without
	// snapshot files.
	ErrNoSnapshots = errors.New("refsnap: no snapshots")
)

// gpuResource is the only resource the artifact's jobs request.
const gpuResource = "nvidia.com/gpu"

// Meta is the capture context of a snapshot.
type Meta struct {
	Workload string  `json:"workload"`
	SimTime  float64 `json:"sim_time"`
	Jobs     int     `json:"n_jobs"`
	Seed     int64   `json:"seed"`
}

// Reference is what the artifact measured on one snapshot.
type Reference struct {
	Jobs           int       `json:"n_jobs"`
	CurrentFitness float64   `json:"current_allocation_fitness"`
	GAFitness      []float64 `json:"reference_ga_fitness_seeds_0_4"`
	GAFitnessMed   float64   `json:"reference_ga_fitness_median"`
}

// Entry is one snapshot file of a directory with its reference figures.
type Entry struct {
	// Name is the file name without ".json".
	Name      string
	Meta      Meta
	Snapshot  *optimizer.Snapshot
	Reference Reference
}

type fileJSON struct {
	Meta  *Meta      `json:"meta"`
	Nodes []nodeJSON `json:"nodes"`
	Jobs  []jobJSON  `json:"jobs"`
}

type nodeJSON struct {
	Name        json.RawMessage    `json:"name"`
	Resources   map[string]float64 `json:"resources"`
	Preemptible bool               `json:"preemptible"`
}

type jobJSON struct {
	Name       *string            `json:"name"`
	Creation   *float64           `json:"creation_timestamp"`
	Attained   *float64           `json:"attained_service"`
	MinRep     *int               `json:"min_replicas"`
	MaxRep     *int               `json:"max_replicas"`
	Restarts   *int               `json:"num_restarts"`
	Age        *float64           `json:"age"`
	Resources  map[string]float64 `json:"resources"`
	Allocation *[]json.RawMessage `json:"allocation"`
	Speedup    *speedupJSON       `json:"speedup"`
}

type speedupJSON struct {
	Kind         string    `json:"kind"`
	PerfParams   []float64 `json:"perf_params"`
	GradParams   []float64 `json:"grad_params"`
	InitBatch    *float64  `json:"init_batch_size"`
	MaxBatch     *float64  `json:"max_batch_size"`
	AtomicRange  []float64 `json:"atomic_bsz_range"`
	Accumulation *bool     `json:"accumulation"`
}

// Decode reads one snapshot file. The snapshot's nodes are ordered as the
// reference orders them (non-preemptible first, then by name, numerically
// when both names are numbers); its jobs keep the file's order.
func Decode(r io.Reader) (*optimizer.Snapshot, Meta, error) {
	var f fileJSON
	dec := json.NewDecoder(r)
	if err := dec.Decode(&f); err != nil {
		return nil, Meta{}, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if f.Meta == nil {
		return nil, Meta{}, fmt.Errorf("%w: missing meta", ErrFormat)
	}
	if len(f.Nodes) == 0 {
		return nil, Meta{}, fmt.Errorf("%w: no nodes", ErrFormat)
	}
	type node struct {
		id          string
		numeric     bool
		num         float64
		gpus        int
		preemptible bool
	}
	nodes := make([]node, len(f.Nodes))
	for i, n := range f.Nodes {
		id, err := name(n.Name)
		if err != nil {
			return nil, Meta{}, fmt.Errorf("%w: node %d: %w", ErrFormat, i, err)
		}
		g, ok := n.Resources[gpuResource]
		if !ok || g < 0 || g != math.Trunc(g) || g > 1<<20 {
			return nil, Meta{}, fmt.Errorf("%w: node %q: %s is %v", ErrFormat, id, gpuResource, n.Resources[gpuResource])
		}
		num, err := strconv.ParseFloat(id, 64)
		nodes[i] = node{id: id, numeric: err == nil, num: num, gpus: int(g), preemptible: n.Preemptible}
	}
	sort.SliceStable(nodes, func(a, b int) bool {
		na, nb := nodes[a], nodes[b]
		if na.preemptible != nb.preemptible {
			return !na.preemptible
		}
		if na.numeric && nb.numeric {
			return na.num < nb.num
		}
		return na.id < nb.id
	})
	snap := &optimizer.Snapshot{Now: f.Meta.SimTime, Nodes: make([]optimizer.Node, len(nodes))}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if _, dup := index[n.id]; dup {
			return nil, Meta{}, fmt.Errorf("%w: duplicate node %q", ErrFormat, n.id)
		}
		index[n.id] = i
		snap.Nodes[i] = optimizer.Node{ID: n.id, GPUs: n.gpus}
	}
	for i := range f.Jobs {
		job, err := decodeJob(&f.Jobs[i], index)
		if err != nil {
			return nil, Meta{}, fmt.Errorf("%w: job %d: %w", ErrFormat, i, err)
		}
		snap.Jobs = append(snap.Jobs, job)
	}
	if f.Meta.Jobs != len(snap.Jobs) {
		return nil, Meta{}, fmt.Errorf("%w: meta says %d jobs, file has %d", ErrFormat, f.Meta.Jobs, len(snap.Jobs))
	}
	return snap, *f.Meta, nil
}

// name turns a JSON string or number into a node name.
func name(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("missing name")
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf("name %s is neither a string nor a number", raw)
	}
	return n.String(), nil
}

func decodeJob(j *jobJSON, nodes map[string]int) (optimizer.Job, error) {
	switch {
	case j.Name == nil:
		return optimizer.Job{}, errors.New("missing name")
	case j.Creation == nil, j.Attained == nil, j.MinRep == nil, j.MaxRep == nil,
		j.Restarts == nil, j.Age == nil, j.Speedup == nil, j.Allocation == nil:
		return optimizer.Job{}, fmt.Errorf("%q: missing one of creation_timestamp, attained_service, min_replicas, max_replicas, num_restarts, age, allocation, speedup", *j.Name)
	}
	if g, ok := j.Resources[gpuResource]; len(j.Resources) > 0 && (!ok || g != 1 || len(j.Resources) != 1) {
		return optimizer.Job{}, fmt.Errorf("%q: resources %v: only one GPU per replica is supported", *j.Name, j.Resources)
	}
	if *j.MinRep < 0 || *j.MaxRep < *j.MinRep || *j.Restarts < 0 || !(*j.Age >= 0) || math.IsInf(*j.Age, 0) {
		return optimizer.Job{}, fmt.Errorf("%q: replicas [%d, %d], restarts %d, age %v", *j.Name, *j.MinRep, *j.MaxRep, *j.Restarts, *j.Age)
	}
	job := optimizer.Job{
		ID:          *j.Name,
		SubmitTime:  *j.Creation,
		Age:         *j.Age,
		Attained:    *j.Attained,
		Restarts:    *j.Restarts,
		MinReplicas: *j.MinRep,
		MaxReplicas: *j.MaxRep,
	}
	counts := map[int]int{}
	for _, raw := range *j.Allocation {
		id, err := name(raw)
		if err != nil {
			return optimizer.Job{}, fmt.Errorf("%q: allocation: %w", job.ID, err)
		}
		n, ok := nodes[id]
		if !ok {
			return optimizer.Job{}, fmt.Errorf("%q: allocation names unknown node %q", job.ID, id)
		}
		counts[n]++
	}
	for n, c := range counts {
		job.Current = append(job.Current, optimizer.NodeCount{Node: n, Count: c})
	}
	sort.Slice(job.Current, func(a, b int) bool { return job.Current[a].Node < job.Current[b].Node })
	model, err := decodeSpeedup(j.Speedup)
	if err != nil {
		return optimizer.Job{}, fmt.Errorf("%q: speedup: %w", job.ID, err)
	}
	job.Model = model
	return job, nil
}

func decodeSpeedup(s *speedupJSON) (*goodput.Model, error) {
	switch s.Kind {
	case "linear":
		return nil, nil
	case "goodput":
	default:
		return nil, fmt.Errorf("unknown kind %q", s.Kind)
	}
	if len(s.PerfParams) != 7 {
		return nil, fmt.Errorf("perf_params has %d values, want 7", len(s.PerfParams))
	}
	if len(s.GradParams) != 2 {
		return nil, fmt.Errorf("grad_params has %d values, want 2", len(s.GradParams))
	}
	if len(s.AtomicRange) != 2 {
		return nil, fmt.Errorf("atomic_bsz_range has %d values, want 2", len(s.AtomicRange))
	}
	if s.InitBatch == nil || s.MaxBatch == nil || s.Accumulation == nil {
		return nil, errors.New("missing init_batch_size, max_batch_size or accumulation")
	}
	ints := []float64{*s.InitBatch, *s.MaxBatch, s.AtomicRange[0], s.AtomicRange[1]}
	for _, v := range ints {
		if v != math.Trunc(v) || v < 1 || v > 1<<30 {
			return nil, fmt.Errorf("batch size %v is not a positive integer", v)
		}
	}
	p := s.PerfParams
	md := &goodput.Model{
		Params: goodput.Params{AlphaC: p[0], BetaC: p[1], AlphaN: p[2], BetaN: p[3], AlphaR: p[4], BetaR: p[5], Gamma: p[6]},
		Grad:   goodput.GradStats{GradSqr: s.GradParams[0], GradVar: s.GradParams[1]},
		Limits: goodput.Limits{
			InitBatch:    int(ints[0]),
			MaxBatch:     int(ints[1]),
			MinLocal:     int(ints[2]),
			MaxLocal:     int(ints[3]),
			Accumulation: *s.Accumulation,
		},
	}
	if err := md.Validate(); err != nil {
		return nil, err
	}
	return md, nil
}

// Load reads one snapshot file.
func Load(path string) (*optimizer.Snapshot, Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("refsnap: %w", err)
	}
	defer f.Close()
	snap, meta, err := Decode(f)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("%s: %w", path, err)
	}
	return snap, meta, nil
}

// DecodeReference reads reference-fitness.json: snapshot name to figures.
func DecodeReference(r io.Reader) (map[string]Reference, error) {
	var refs map[string]Reference
	if err := json.NewDecoder(r).Decode(&refs); err != nil {
		return nil, fmt.Errorf("%w: reference fitness: %w", ErrFormat, err)
	}
	for name, ref := range refs {
		if !(ref.CurrentFitness > 0) || !(ref.GAFitnessMed > 0) {
			return nil, fmt.Errorf("%w: reference fitness of %q: current %v, median %v", ErrFormat, name, ref.CurrentFitness, ref.GAFitnessMed)
		}
	}
	return refs, nil
}

// LoadDir reads every snap-*.json of dir with its figures from
// dir/reference-fitness.json, sorted by name. A snapshot without reference
// figures is an error.
func LoadDir(dir string) ([]Entry, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "snap-*.json"))
	if err != nil {
		return nil, fmt.Errorf("refsnap: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoSnapshots, dir)
	}
	rf, err := os.Open(filepath.Join(dir, "reference-fitness.json"))
	if err != nil {
		return nil, fmt.Errorf("refsnap: %w", err)
	}
	defer rf.Close()
	refs, err := DecodeReference(rf)
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	entries := make([]Entry, 0, len(paths))
	for _, p := range paths {
		snap, meta, err := Load(p)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(filepath.Base(p), ".json")
		ref, ok := refs[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s has no entry in reference-fitness.json", ErrFormat, name)
		}
		entries = append(entries, Entry{Name: name, Meta: meta, Snapshot: snap, Reference: ref})
	}
	return entries, nil
}
