package node

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"pollux/actors/jobspec"
)

// fencingFile is the file in the agent's data directory holding its
// fencing state.
const fencingFile = "fencing.json"

// remembered bounds how many jobs' newest incarnations the node keeps:
// those of currently assigned jobs always, then those of jobs dropped from
// its assignments, most recently dropped first.
const remembered = 1024

// fencing is what the node must remember across restarts to never act on
// a deposed leader's assignment nor run an incarnation twice: the cluster
// it serves, the newest (term, generation) it accepted, and per job the
// newest incarnation it has accepted. Dropped holds, for jobs no longer
// assigned, the generation that dropped them (what pruning goes by).
type fencing struct {
	ClusterID  string            `json:"cluster_id"`
	Term       uint64            `json:"term"`
	Generation uint64            `json:"generation"`
	Latest     map[string]uint64 `json:"latest"`
	Dropped    map[string]uint64 `json:"dropped,omitempty"`
}

func (f *fencing) clone() fencing {
	c := *f
	c.Latest, c.Dropped = maps.Clone(f.Latest), maps.Clone(f.Dropped)
	if c.Latest == nil {
		c.Latest = map[string]uint64{}
	}
	if c.Dropped == nil {
		c.Dropped = map[string]uint64{}
	}
	return c
}

// prune forgets the longest-dropped jobs beyond the remembered bound. A
// job's incarnations only grow, so a job assigned again after it was
// forgotten comes back with a newer incarnation than any it ran here.
func (f *fencing) prune() {
	if len(f.Latest) <= remembered {
		return
	}
	gone := slices.SortedFunc(maps.Keys(f.Dropped), func(a, b string) int {
		return cmp.Or(cmp.Compare(f.Dropped[a], f.Dropped[b]), cmp.Compare(a, b))
	})
	for _, job := range gone[:min(len(gone), len(f.Latest)-remembered)] {
		delete(f.Latest, job)
		delete(f.Dropped, job)
	}
}

func (f *fencing) equal(g *fencing) bool {
	return f.ClusterID == g.ClusterID && f.Term == g.Term && f.Generation == g.Generation &&
		maps.Equal(f.Latest, g.Latest) && maps.Equal(f.Dropped, g.Dropped)
}

// loadFencing reads the fencing state of dir; a directory without one is
// a fresh start. A file that does not decode is an error: starting
// without it could rerun an old incarnation.
func loadFencing(dir string) (fencing, error) {
	f := fencing{Latest: map[string]uint64{}}
	if dir == "" {
		return f, nil
	}
	path := filepath.Join(dir, fencingFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("%w: reading fencing state: %w", ErrConfig, err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%w: fencing state %s does not decode (%v); remove it only if no worker of this agent's jobs can still run elsewhere", ErrConfig, path, err)
	}
	f = f.clone()
	for job := range f.Latest {
		if err := jobspec.CheckName(job); err != nil {
			return f, fmt.Errorf("%w: fencing state %s: %w", ErrConfig, path, err)
		}
	}
	return f, nil
}

// save writes f into dir atomically and durably: a temporary file,
// fsynced, renamed over the old one, and the directory fsynced.
func (f *fencing) save(dir string) error {
	if dir == "" {
		return nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("node: encoding fencing state: %w", err)
	}
	tmp, err := os.CreateTemp(dir, fencingFile+".tmp*")
	if err != nil {
		return fmt.Errorf("node: writing fencing state: %w", err)
	}
	_, werr := tmp.Write(b)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("node: writing fencing state: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, fencingFile)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("node: writing fencing state: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("node: syncing data directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("node: syncing data directory: %w", err)
	}
	return nil
}
