package rootgate

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		env        string
		skip, fail bool
	}{
		{env: "", skip: true},
		{env: "0", skip: true},
		{env: "1", fail: true},
	} {
		t.Setenv(RequireEnv, tc.env)
		r := &recorder{TB: t}
		Skip(r, "no %s", "netns")
		if (r.skipped != "") != tc.skip || (r.failed != "") != tc.fail {
			t.Errorf("%s=%q: skipped %q, failed %q", RequireEnv, tc.env, r.skipped, r.failed)
		}
		if tc.fail && !strings.Contains(r.failed, RequireEnv) {
			t.Errorf("failure %q does not name %s", r.failed, RequireEnv)
		}
	}
}

func TestNeedRoot(t *testing.T) {
	t.Setenv(RequireEnv, "1")
	r := &recorder{TB: t}
	NeedRoot(r, "mounts a tmpfs")
	if root := os.Geteuid() == 0; root != (r.failed == "") {
		t.Errorf("as uid %d: failed %q", os.Geteuid(), r.failed)
	}
}
