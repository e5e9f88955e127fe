package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

// step is one Reserve in a table test: at offset at from the start, key
// asks with rate and burst and gets wait.
type step struct {
	at    time.Duration
	key   string
	rate  float64
	burst int
	wait  time.Duration
}

func TestReserve(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "burst then refused until one token refills", steps: []step{
			{0, "a", 1, 2, 0}, {0, "a", 1, 2, 0}, {0, "a", 1, 2, time.Second},
			{500 * time.Millisecond, "a", 1, 2, 500 * time.Millisecond},
			{time.Second, "a", 1, 2, 0}, {time.Second, "a", 1, 2, time.Second},
		}},
		{name: "a refusal takes nothing", steps: []step{
			{0, "a", 2, 1, 0}, {0, "a", 2, 1, 500 * time.Millisecond}, {0, "a", 2, 1, 500 * time.Millisecond},
			{500 * time.Millisecond, "a", 2, 1, 0},
		}},
		{name: "submitters have their own buckets", steps: []step{
			{0, "a", 1, 1, 0}, {0, "a", 1, 1, time.Second}, {0, "b", 1, 1, 0}, {0, "b", 1, 1, time.Second},
		}},
		{name: "a changed quota starts a full bucket", steps: []step{
			{0, "a", 0.5, 1, 0}, {0, "a", 0.5, 1, 2 * time.Second}, {0, "a", 0.5, 3, 0}, {0, "a", 0.5, 3, 0}, {0, "a", 0.5, 3, 0},
			{0, "a", 0.5, 3, 2 * time.Second},
		}},
		{name: "refill stops at the burst", steps: []step{
			{0, "a", 10, 2, 0}, {0, "a", 10, 2, 0}, {time.Hour, "a", 10, 2, 0}, {time.Hour, "a", 10, 2, 0},
			{time.Hour, "a", 10, 2, 100 * time.Millisecond},
		}},
	}
	start := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Limiter
			for i, s := range tt.steps {
				if got := l.Reserve(s.key, s.rate, s.burst, start.Add(s.at)); got != s.wait {
					t.Errorf("step %d (%+v): wait %v, want %v", i, s, got, s.wait)
				}
			}
		})
	}
}

// TestBucketsBounded: past MaxBuckets keys the full buckets are dropped;
// a bucket still refilling is kept.
func TestBucketsBounded(t *testing.T) {
	var l Limiter
	now := time.Unix(1000, 0)
	l.Reserve("spent", 0.001, 1, now)
	for i := range MaxBuckets {
		l.Reserve(fmt.Sprint("k", i), 1000, 1, now)
	}
	later := now.Add(time.Second)
	l.Reserve("new", 1, 1, later)
	if n := len(l.buckets); n > 3 {
		t.Errorf("%d buckets kept, want the spent one and the new one", n)
	}
	if got := l.Reserve("spent", 0.001, 1, later); got == 0 {
		t.Errorf("the spent bucket was dropped (a new one admits at once)")
	}
}

func TestReset(t *testing.T) {
	var l Limiter
	now := time.Unix(1000, 0)
	l.Reserve("a", 1, 1, now)
	l.Reset()
	if got := l.Reserve("a", 1, 1, now); got != 0 {
		t.Errorf("after Reset: wait %v, want a full bucket", got)
	}
}

func ExampleLimiter() {
	var l Limiter
	now := time.Unix(0, 0)
	for range 3 {
		fmt.Println(l.Reserve("token-a", 1, 2, now))
	}
	// Output:
	// 0s
	// 0s
	// 1s
}

func BenchmarkReserve(b *testing.B) {
	var l Limiter
	now := time.Unix(0, 0)
	for i := range b.N {
		l.Reserve("a", 1e9, 1000, now.Add(time.Duration(i)))
	}
}
