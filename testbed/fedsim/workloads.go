package fedsim

import (
	"fmt"
	"math"
	"path/filepath"

	"pollux/testbed/workload"
)

// Workloads builds every lab's workload, in lab order. With dir (the
// directory `pollux sim --workload` names) every lab replays its file
// from there; without, a lab with a generate section draws its jobs, and
// one with only a file reads it relative to base (the federation file's
// directory; "" for the built-in example, which then needs dir). check
// decides whether an application can be simulated (nil accepts all). Kept jobs are named
// "<lab>/<job>" and submitted at time * time_scale + offset_s.
func (fed *Federation) Workloads(dir, base string, check func(app string) error) ([]workload.Workload, error) {
	out := make([]workload.Workload, len(fed.Labs))
	for i, lab := range fed.Labs {
		wl, err := lab.workload(dir, base, check)
		if err != nil {
			return nil, fmt.Errorf("%w: lab %s: %w", ErrWorkload, lab.Name, err)
		}
		out[i] = wl
	}
	return out, nil
}

func (lab *Lab) workload(dir, base string, check func(string) error) (workload.Workload, error) {
	w := lab.Workload
	var src workload.Workload
	switch {
	case dir != "" || (w.Generate == nil && w.File != ""):
		if w.File == "" {
			return src, fmt.Errorf("no workload file to take from %s", dir)
		}
		root := dir
		if root == "" {
			if base == "" {
				return src, fmt.Errorf("workload file %s: give the directory holding it (pollux sim --workload DIR)", w.File)
			}
			root = base
		}
		path := w.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		wls, err := workload.LoadChecked(path, check)
		if err != nil {
			return src, err
		}
		if len(wls) != 1 {
			return src, fmt.Errorf("workload %s is a directory of %d files, want one file", path, len(wls))
		}
		src = wls[0]
	default:
		g := workload.DefaultGenConfig()
		g.Jobs, g.Window = w.Generate.Jobs, w.Generate.Window
		for _, m := range g.Mix {
			if check == nil {
				break
			}
			if err := check(m.App); err != nil {
				return src, fmt.Errorf("the generated workload needs application %q: %w", m.App, err)
			}
		}
		var err error
		if src, err = workload.Generate(g, w.Generate.Seed, "generated"); err != nil {
			return src, err
		}
	}
	out := workload.Workload{Name: lab.Name + "/" + src.Name}
	every, first := w.Every, w.First
	if w.Generate != nil && dir == "" {
		// The generator draws the lab's jobs; sampling is for files.
		every, first = 1, 0
	}
	for i, j := range src.Jobs {
		if i%every != first {
			continue
		}
		j.Name = lab.Name + "/" + j.Name
		j.Time = math.Round(j.Time*w.TimeScale + w.Offset)
		out.Jobs = append(out.Jobs, j)
	}
	if len(out.Jobs) == 0 {
		return out, fmt.Errorf("no job of %s kept (every %d from %d of %d jobs)", src.Name, every, first, len(src.Jobs))
	}
	return out, nil
}
