package artifact

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeT records what Need does instead of stopping the test.
type fakeT struct {
	testing.TB
	skipped, failed bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Skipf(string, ...any)  { f.skipped = true }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true }

func TestNeedSkipsOrFails(t *testing.T) {
	missing := filepath.Join("definitely", "not", "here")
	t.Setenv(RequireEnv, "")
	f := &fakeT{TB: t}
	Need(f, missing)
	if !f.skipped || f.failed {
		t.Errorf("without %s: skipped %v failed %v, want a skip", RequireEnv, f.skipped, f.failed)
	}
	t.Setenv(RequireEnv, "1")
	f = &fakeT{TB: t}
	Need(f, missing)
	if f.skipped || !f.failed {
		t.Errorf("with %s=1: skipped %v failed %v, want a failure", RequireEnv, f.skipped, f.failed)
	}
}

func TestNeedFindsExisting(t *testing.T) {
	if got := Path("a", "b"); filepath.Base(got) != "b" || filepath.Base(filepath.Dir(got)) != "a" {
		t.Errorf("Path joined %q", got)
	}
	if _, err := os.Stat(Shared()); err == nil {
		f := &fakeT{TB: t}
		Need(f)
		if f.skipped || f.failed {
			t.Errorf("Need(shared) skipped %v failed %v although %s exists", f.skipped, f.failed, Shared())
		}
	}
}
