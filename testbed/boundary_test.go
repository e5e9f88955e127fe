package testbed_test

import (
	"os/exec"
	"strings"
	"testing"
)

// goList returns, for every package the patterns match, the list field
// ("Deps": transitive imports, "Imports": direct ones) as `go list`
// computes it (test files excluded: they may use test equipment).
func goList(t *testing.T, field string, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", "{{.ImportPath}}: {{join ." + field + " \" \"}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, rest, _ := strings.Cut(line, ": ")
		m[pkg] = strings.Fields(rest)
	}
	return m
}

func testbedDeps(ds []string) []string {
	var out []string
	for _, d := range ds {
		if d == "pollux/testbed" || strings.HasPrefix(d, "pollux/testbed/") {
			out = append(out, d)
		}
	}
	return out
}

// TestProductionDoesNotDependOnTestbed: the running system (consensus,
// cluster, optimizer, actors) is free of the test harness and equipment;
// only cmd/pollux and testbed itself may depend on testbed.
func TestProductionDoesNotDependOnTestbed(t *testing.T) {
	pkgs := goList(t, "Deps", "./consensus/...", "./cluster/...", "./optimizer/...", "./actors/...")
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d production packages: %v", len(pkgs), pkgs)
	}
	for pkg, ds := range pkgs {
		if bad := testbedDeps(ds); len(bad) > 0 {
			t.Errorf("%s depends on %v", pkg, bad)
		}
	}
	// The same query sees testbed where it is a dependency.
	if bad := testbedDeps(goList(t, "Deps", "./cmd/pollux")["pollux/cmd/pollux"]); len(bad) == 0 {
		t.Error("go list shows no testbed dependency of cmd/pollux, which has some: the query is blind")
	}
}
