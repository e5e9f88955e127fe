package simrun

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"pollux/testbed"
	"pollux/testbed/builtin"
	"pollux/testbed/sim"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

// simInputs loads the workloads and the traces of every application they
// name on every GPU type of the cluster.
func simInputs(o Options, cfg sim.Config) (testbed.TypedCatalog, []workload.Workload, error) {
	typed := len(cfg.Cluster) > 0
	var types []string
	if typed {
		for _, g := range cfg.Cluster {
			types = append(types, g.Type)
		}
	} else {
		types = []string{""}
	}
	if o.Traces == "" {
		if typed {
			return nil, nil, fmt.Errorf("sim: --cluster needs --traces with per-type traces (placements-TYPE.csv), e.g. ../shared/sia-artifact/traces")
		}
		cat, err := builtin.Catalog()
		if err != nil {
			return nil, nil, err
		}
		wls, err := simWorkloads(o.Workload, o.Seed, func(app string) error {
			if _, ok := cat[app]; !ok {
				return fmt.Errorf("%w %q", workload.ErrUnknownApp, app)
			}
			return nil
		})
		return testbed.TypedCatalog{"": cat}, wls, err
	}
	if _, err := os.Stat(o.Traces); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
	}
	if typed {
		if err := checkTraceTypes(o.Traces, types); err != nil {
			return nil, nil, err
		}
	}
	check := typedAppCheck(o.Traces, types)
	var apps []string
	if o.Workload == "" {
		apps = genApps()
	}
	wls, err := simWorkloads(o.Workload, o.Seed, check)
	if err != nil {
		return nil, nil, err
	}
	for _, wl := range wls {
		for _, j := range wl.Jobs {
			if !slices.Contains(apps, j.App) {
				apps = append(apps, j.App)
			}
		}
	}
	sort.Strings(apps)
	if !typed {
		// The untyped layout: every application directory is loaded, as
		// before, so that bad trace files anywhere are reported.
		cat, err := trace.Load(o.Traces)
		if err != nil {
			return nil, nil, err
		}
		return testbed.TypedCatalog{"": cat}, wls, nil
	}
	cats, err := trace.LoadTyped(o.Traces, types, apps)
	return cats, wls, err
}

// typedAppCheck is the check of a workload's application against the
// per-type traces in dir: it must have traces for every type of types.
func typedAppCheck(dir string, types []string) func(string) error {
	return func(app string) error {
		have, err := trace.Types(filepath.Join(dir, app))
		if err != nil || len(have) == 0 {
			return fmt.Errorf("%w %q: no trace directory %s with a placements file", workload.ErrUnknownApp, app, filepath.Join(dir, app))
		}
		for _, t := range types {
			if !slices.Contains(have, t) {
				if t == "" {
					return fmt.Errorf("%w %q: its traces are per GPU type (%s) and the cluster is untyped; give --cluster", workload.ErrUnknownApp, app, strings.Join(have, ", "))
				}
				return fmt.Errorf("%w %q: no traces for GPU type %s in %s (it has %s)", workload.ErrUnknownApp, app, t, filepath.Join(dir, app), describe(have))
			}
		}
		return nil
	}
}

// checkTraceTypes refuses a cluster GPU type that no application has
// traces for.
func checkTraceTypes(dir string, types []string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", trace.ErrNoTraces, err)
	}
	found := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		have, err := trace.Types(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, t := range have {
			found[t] = true
		}
	}
	for _, t := range types {
		if !found[t] {
			return fmt.Errorf("sim: --cluster: GPU type %q has no traces in %s (no application has placements-%s.csv)", t, dir, t)
		}
	}
	return nil
}

func describe(types []string) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t
		if t == "" {
			names[i] = "untyped traces"
		}
	}
	return strings.Join(names, ", ")
}

// genApps are the applications the generated workloads draw from.
func genApps() []string {
	var apps []string
	for _, m := range workload.DefaultGenConfig().Mix {
		apps = append(apps, m.App)
	}
	return apps
}

// simWorkloads reads the workloads of wl (--workload) (checking every job's application) or
// draws the generated workloads, whose applications must all pass check.
func simWorkloads(wl string, seed uint64, check func(string) error) ([]workload.Workload, error) {
	if wl != "" {
		return workload.LoadChecked(wl, check)
	}
	gen := workload.DefaultGenConfig()
	for _, m := range gen.Mix {
		if err := check(m.App); err != nil {
			return nil, fmt.Errorf("sim: the generated workload needs application %q: %w", m.App, err)
		}
	}
	var wls []workload.Workload
	for i := 0; i < GeneratedWorkloads; i++ {
		wl, err := workload.Generate(gen, seed*1000+uint64(i), fmt.Sprintf("generated-%d", i+1))
		if err != nil {
			return nil, err
		}
		wls = append(wls, wl)
	}
	return wls, nil
}
