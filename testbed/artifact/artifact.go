package artifact

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// RequireEnv is the environment variable that turns a missing artifact
// from a skip into a failure.
const RequireEnv = "POLLUX_REQUIRE_ARTIFACT"

// Required reports whether missing artifacts must fail tests.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Shared is the ../shared directory beside the repository root, found from
// this source file's location (tests run in their package's directory).
func Shared() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return filepath.Join("..", "shared")
	}
	// file is <root>/testbed/artifact/artifact.go.
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "shared")
}

// Path joins elem under Shared.
func Path(elem ...string) string {
	return filepath.Join(append([]string{Shared()}, elem...)...)
}

// Need returns Path(elem...) if it exists. Otherwise it skips t, or fails
// it when Required.
func Need(t testing.TB, elem ...string) string {
	t.Helper()
	p := Path(elem...)
	if _, err := os.Stat(p); err != nil {
		if Required() {
			t.Fatalf("%s=1 but the artifact %s is missing: %v", RequireEnv, p, err)
			return p
		}
		t.Skipf("artifact %s absent (../shared not present; set %s=1 to fail instead): %v", p, RequireEnv, err)
	}
	return p
}
