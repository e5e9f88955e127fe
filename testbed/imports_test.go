package testbed_test

import (
	"slices"
	"strings"
	"testing"
)

// under reports whether pkg is dir or a package below it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// standard reports whether an import path is the standard library's: no
// dot in its first element (the module, "pollux", has none either).
func standard(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return !strings.Contains(first, ".") && first != "pollux"
}

// The import rules of the running system, each a filter returning the
// dependencies it forbids.
var (
	// noActors: cluster and consensus never reach the actors.
	noActors = func(ds []string) []string {
		return slices.DeleteFunc(slices.Clone(ds), func(d string) bool { return !under(d, "pollux/actors") })
	}
	// optimizerOnly: the optimizer imports the standard library, gonum
	// and itself, nothing else.
	optimizerOnly = func(ds []string) []string {
		return slices.DeleteFunc(slices.Clone(ds), func(d string) bool {
			return standard(d) || under(d, "gonum.org/v1/gonum") || under(d, "pollux/optimizer")
		})
	}
	// stdOnly: a leaf imports the standard library alone.
	stdOnly = func(ds []string) []string {
		return slices.DeleteFunc(slices.Clone(ds), standard)
	}
	// topologyOnly: of the optimizer, only its topology names.
	topologyOnly = func(ds []string) []string {
		return slices.DeleteFunc(slices.Clone(ds), func(d string) bool {
			return !under(d, "pollux/optimizer") || d == "pollux/optimizer/topology"
		})
	}
)

// TestImportRules keeps the arrows pointing down: no package under
// cluster/ or consensus/ depends (even transitively) on one under
// actors/; no package under optimizer/ imports anything but the standard
// library, gonum and optimizer/... (nor depends on another pollux
// package); optimizer/topology is a leaf; and package cluster uses no
// optimizer package but optimizer/topology.
func TestImportRules(t *testing.T) {
	low := goList(t, "Deps", "./cluster/...", "./consensus/...")
	if len(low) < 5 || low["pollux/cluster"] == nil || low["pollux/consensus"] == nil {
		t.Fatalf("go list found only %d cluster and consensus packages: %v", len(low), low)
	}
	for pkg, ds := range low {
		if bad := noActors(ds); len(bad) > 0 {
			t.Errorf("%s depends on %v", pkg, bad)
		}
	}

	opt := goList(t, "Imports", "./optimizer/...")
	if len(opt) < 4 {
		t.Fatalf("go list found only %d optimizer packages: %v", len(opt), opt)
	}
	for pkg, is := range opt {
		if bad := optimizerOnly(is); len(bad) > 0 {
			t.Errorf("%s imports %v", pkg, bad)
		}
	}
	for pkg, ds := range goList(t, "Deps", "./optimizer/...") {
		var pollux []string
		for _, d := range ds {
			if under(d, "pollux") {
				pollux = append(pollux, d)
			}
		}
		if bad := optimizerOnly(pollux); len(bad) > 0 {
			t.Errorf("%s depends on %v", pkg, bad)
		}
	}
	leaf := goList(t, "Deps", "./optimizer/topology")["pollux/optimizer/topology"]
	if len(leaf) == 0 {
		t.Fatal("go list shows no dependency of optimizer/topology: the query is blind")
	}
	if bad := stdOnly(leaf); len(bad) > 0 {
		t.Errorf("optimizer/topology depends on %v", bad)
	}
	clusterDeps := low["pollux/cluster"]
	if bad := topologyOnly(clusterDeps); len(bad) > 0 {
		t.Errorf("pollux/cluster depends on %v", bad)
	}

	// The same queries see what they forbid where it is: the rules are
	// not blind.
	if !slices.Contains(clusterDeps, "pollux/optimizer/topology") {
		t.Errorf("go list shows no optimizer/topology dependency of cluster, which imports it: %v", clusterDeps)
	}
	if !slices.Contains(opt["pollux/optimizer"], "gonum.org/v1/gonum/optimize") && !slices.Contains(opt["pollux/optimizer/goodput"], "gonum.org/v1/gonum/optimize") {
		t.Error("go list shows no gonum import in the optimizer, which has one: the query is blind")
	}
	server := goList(t, "Deps", "./cmd/pollux")["pollux/cmd/pollux"]
	for name, rule := range map[string]func([]string) []string{
		"no actors": noActors, "optimizer only": optimizerOnly, "standard library only": stdOnly, "topology only": topologyOnly,
	} {
		if len(rule(server)) == 0 {
			t.Errorf("rule %q finds nothing in cmd/pollux, which depends on the actors, cobra and the optimizer: it is blind", name)
		}
	}
}
