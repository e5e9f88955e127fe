package rootgate

import (
	"fmt"
	"os"
	"testing"
)

// RequireEnv is the environment variable that turns a root-gated skip
// into a failure.
const RequireEnv = "POLLUX_REQUIRE_ROOT"

// Required reports whether root-gated tests must run.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Skip skips t, saying why (a format and its arguments), or fails it
// when Required.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s=1 but this root-gated test cannot run: %s", RequireEnv, why)
		return
	}
	t.Skipf("%s (set %s=1 to fail instead)", why, RequireEnv)
}

// NeedRoot skips t (or fails it when Required) unless the process runs
// as root; what says what needs root.
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		Skip(t, "needs root: %s (running as uid %d)", what, uid)
	}
}
