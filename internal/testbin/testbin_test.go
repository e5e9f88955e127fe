package testbin

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBuildRunsAsPollux: the binary Build makes is pollux, which
// answers its help.
func TestBuildRunsAsPollux(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pollux")
	}
	out, err := exec.Command(Build(t), "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "pollux") {
		t.Fatalf("pollux --help: %v\n%s", err, out)
	}
}
