package poll

import (
	"testing"
	"time"
)

// The pause between two checks starts at firstStep and doubles up to
// maxStep: a condition that soon holds is seen at once, and a slow one
// (a cluster of processes answering over HTTP) is not asked a hundred
// times a second.
const (
	firstStep = 5 * time.Millisecond
	maxStep   = 100 * time.Millisecond
)

// Until checks cond until it holds, and fails the test with
// what in the message if it still does not hold after within. Call it
// from the test's own goroutine (it may call t.Fatalf).
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Wait(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Wait checks cond until it holds or within passes, and
// reports whether it held; callers that check the outcome themselves
// (with a message of their own) use it instead of Until.
func Wait(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for step := firstStep; !cond(); step = min(2*step, maxStep) {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(step)
	}
	return true
}
