package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
}

func TestUntilAndWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holdAt int32 // the check from which cond holds; 0: never
		want   bool
	}{
		{"at once", 1, true},
		{"after some checks", 4, true},
		{"never", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			cond := func() bool { return tc.holdAt > 0 && n.Add(1) >= tc.holdAt }
			if got := Wait(time.Second, cond); got != tc.want {
				t.Errorf("Wait = %v, want %v", got, tc.want)
			}
			n.Store(0)
			f := &fakeT{TB: t}
			Until(f, time.Second, "the condition", cond)
			if failed := f.failed != ""; failed == tc.want {
				t.Errorf("Until failed %v, want %v", failed, !tc.want)
			}
		})
	}
}

// The last check is made after the deadline, so a condition that comes
// true while the waiter sleeps past it still counts.
func TestWaitChecksAfterTheDeadline(t *testing.T) {
	var n atomic.Int32
	if !Wait(0, func() bool { return n.Add(1) >= 2 }) {
		t.Errorf("Wait gave up without a check after the deadline (%d checks)", n.Load())
	}
}
