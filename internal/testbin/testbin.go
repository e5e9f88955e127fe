package testbin

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build builds pollux (pollux/cmd/pollux, with the build tags given)
// into a directory of t's and returns the binary's path. A failed build
// fails t.
func Build(t testing.TB, tags ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go") // go test puts $GOROOT/bin first on PATH
	if err != nil {
		t.Fatalf("testbin: no go command to build pollux with: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "pollux")
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "-o", bin, "pollux/cmd/pollux")
	if b, err := exec.Command(gobin, args...).CombinedOutput(); err != nil {
		t.Fatalf("testbin: go build %s: %v\n%s", strings.Join(args[1:], " "), err, b)
	}
	return bin
}
