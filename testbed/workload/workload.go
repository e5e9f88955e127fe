package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrMalformed is returned for a workload file that cannot be decoded.
	ErrMalformed = errors.New("workload: malformed workload file")
	// ErrUnknownApp is returned for a row naming an application the
	// simulator has no profile for.
	ErrUnknownApp = errors.New("workload: unknown application")
	// ErrNoWorkload is returned for a missing path or a directory without
	// any .csv file.
	ErrNoWorkload = errors.New("workload: no workload")
	// ErrBadMix is returned for a generator configuration that cannot
	// produce jobs.
	ErrBadMix = errors.New("workload: bad generator configuration")
)

// Header is the column list a workload file must start with.
var Header = []string{"name", "time", "application", "num_replicas", "batch_size"}

// Job is one row of a workload: a job submitted at Time seconds that trains
// App. Replicas and Batch are the tuned fixed configuration the baselines
// run it with.
type Job struct {
	Name     string  `json:"name"`
	Time     float64 `json:"time"`
	App      string  `json:"application"`
	Replicas int     `json:"num_replicas"`
	Batch    int     `json:"batch_size"`
}

// Workload is a named list of jobs.
type Workload struct {
	Name string `json:"name"`
	Jobs []Job  `json:"jobs"`
}

// Decode reads one workload CSV. name is used in errors and as the
// workload's name; known reports whether an application exists (nil
// accepts every name).
func Decode(r io.Reader, name string, known func(string) bool) (Workload, error) {
	return DecodeChecked(r, name, knownCheck(known))
}

// knownCheck turns a known predicate into a check.
func knownCheck(known func(string) bool) func(string) error {
	if known == nil {
		return nil
	}
	return func(app string) error {
		if !known(app) {
			return fmt.Errorf("%w %q", ErrUnknownApp, app)
		}
		return nil
	}
}

// DecodeChecked is Decode with check deciding whether an application can
// be simulated (nil accepts every name): its error, which should wrap
// ErrUnknownApp, is reported at the file and line of the first job naming
// the application.
func DecodeChecked(r io.Reader, name string, check func(app string) error) (Workload, error) {
	wl := Workload{Name: strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return wl, fmt.Errorf("%w: %s:1: empty file, want header %q", ErrMalformed, name, strings.Join(Header, ","))
		}
		return wl, fmt.Errorf("%w: %s:1: not a CSV file: %v", ErrMalformed, name, err)
	}
	if !sameHeader(header) {
		return wl, fmt.Errorf("%w: %s:1: header %q, want %q", ErrMalformed, name, truncate(strings.Join(header, ",")), strings.Join(Header, ","))
	}
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return wl, fmt.Errorf("%w: %s:%d: %v", ErrMalformed, name, line, err)
		}
		line, _ := cr.FieldPos(0)
		job, err := decodeRow(rec, check)
		if err != nil {
			return wl, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if first, dup := seen[job.Name]; dup {
			return wl, fmt.Errorf("%w: %s:%d: job name %q already used on line %d", ErrMalformed, name, line, job.Name, first)
		}
		seen[job.Name] = line
		wl.Jobs = append(wl.Jobs, job)
	}
	if len(wl.Jobs) == 0 {
		return wl, fmt.Errorf("%w: %s: no jobs", ErrMalformed, name)
	}
	return wl, nil
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func sameHeader(h []string) bool {
	if len(h) != len(Header) {
		return false
	}
	for i, c := range h {
		if strings.TrimSpace(strings.TrimPrefix(c, "\ufeff")) != Header[i] {
			return false
		}
	}
	return true
}

func decodeRow(rec []string, check func(string) error) (Job, error) {
	if len(rec) != len(Header) {
		return Job{}, fmt.Errorf("%w: %d fields, want %d", ErrMalformed, len(rec), len(Header))
	}
	for i := range rec {
		rec[i] = strings.TrimSpace(rec[i])
	}
	job := Job{Name: rec[0], App: rec[2]}
	if job.Name == "" {
		return Job{}, fmt.Errorf("%w: empty job name", ErrMalformed)
	}
	t, err := strconv.ParseFloat(rec[1], 64)
	switch {
	case err != nil || math.IsNaN(t) || math.IsInf(t, 0):
		return Job{}, fmt.Errorf("%w: time %q is not a finite number", ErrMalformed, rec[1])
	case t < 0:
		return Job{}, fmt.Errorf("%w: negative time %v", ErrMalformed, t)
	case t > 1e9:
		return Job{}, fmt.Errorf("%w: time %v beyond 1e9 seconds", ErrMalformed, t)
	}
	job.Time = t
	if check != nil {
		if err := check(job.App); err != nil {
			return Job{}, err
		}
	}
	if job.Replicas, err = positive(rec[3], "num_replicas"); err != nil {
		return Job{}, err
	}
	if job.Batch, err = positive(rec[4], "batch_size"); err != nil {
		return Job{}, err
	}
	return job, nil
}

func positive(s, col string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > 1<<24 {
		return 0, fmt.Errorf("%w: %s %q is not an integer in [1, %d]", ErrMalformed, col, s, 1<<24)
	}
	return v, nil
}

// ReadFile decodes the workload file at path.
func ReadFile(path string, known func(string) bool) (Workload, error) {
	return readChecked(path, knownCheck(known))
}

func readChecked(path string, check func(string) error) (Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return Workload{}, fmt.Errorf("%w: %v", ErrNoWorkload, err)
	}
	defer f.Close()
	return DecodeChecked(f, path, check)
}

// Load reads a workload file, or every .csv file of a directory (sorted by
// name; other files are ignored), or, for a directory without any, every
// .csv file of each of its subdirectories (a sweep: workload W of
// subdirectory D is named "D/W"); a path that does not exist but is a
// pattern (filepath.Match) names the directories of a sweep. A file given
// explicitly must end in .csv.
func Load(path string, known func(string) bool) ([]Workload, error) {
	return LoadChecked(path, knownCheck(known))
}

// LoadChecked is Load with check deciding which applications can be
// simulated (see DecodeChecked).
func LoadChecked(path string, check func(app string) error) ([]Workload, error) {
	info, err := os.Stat(path)
	if err != nil && strings.ContainsAny(path, "*?[") {
		return loadGlob(path, check)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoWorkload, err)
	}
	if !info.IsDir() {
		if !strings.EqualFold(filepath.Ext(path), ".csv") {
			return nil, fmt.Errorf("%w: %s:1: not a .csv file", ErrMalformed, path)
		}
		wl, err := readChecked(path, check)
		if err != nil {
			return nil, err
		}
		return []Workload{wl}, nil
	}
	out, err := loadDir(path, "", check)
	if err != nil || len(out) > 0 {
		return out, err
	}
	// A sweep: no .csv file here, one directory of them per point.
	subs, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoWorkload, err)
	}
	for _, d := range subs {
		if !d.IsDir() {
			continue
		}
		wls, err := loadDir(filepath.Join(path, d.Name()), d.Name()+"/", check)
		if err != nil {
			return nil, err
		}
		out = append(out, wls...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no .csv file, nor directories of them", ErrNoWorkload, path)
	}
	return out, nil
}

// loadGlob reads the directories pattern matches as the points of a
// sweep (their workloads named "D/W").
func loadGlob(pattern string, check func(app string) error) ([]Workload, error) {
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoWorkload, pattern, err)
	}
	var out []Workload
	for _, m := range matches {
		if info, err := os.Stat(m); err != nil || !info.IsDir() {
			continue
		}
		wls, err := loadDir(m, filepath.Base(m)+"/", check)
		if err != nil {
			return nil, err
		}
		out = append(out, wls...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s matches no directory of .csv files", ErrNoWorkload, pattern)
	}
	return out, nil
}

// loadDir reads every .csv file of dir, sorted by name, each workload's
// name prefixed with prefix.
func loadDir(dir, prefix string, check func(app string) error) ([]Workload, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.csv"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoWorkload, err)
	}
	sort.Strings(matches)
	out := make([]Workload, 0, len(matches))
	for _, m := range matches {
		wl, err := readChecked(m, check)
		if err != nil {
			return nil, err
		}
		wl.Name = prefix + wl.Name
		out = append(out, wl)
	}
	return out, nil
}
