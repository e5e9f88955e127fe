package poll

import (
	"testing"
	"time"
)

// Step is how long Until and Wait pause between two checks of the
// condition.
const Step = 10 * time.Millisecond

// Until checks cond every Step until it holds, and fails the test with
// what in the message if it still does not hold after within. Call it
// from the test's own goroutine (it may call t.Fatalf).
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Wait(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Wait checks cond every Step until it holds or within passes, and
// reports whether it held; callers that check the outcome themselves
// (with a message of their own) use it instead of Until.
func Wait(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(Step)
	}
	return true
}
