package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MaxBuckets bounds the buckets a Limiter keeps; past it, the full ones
// are dropped (a full bucket is what a new one would be).
const MaxBuckets = 4096

// Limiter is a set of token buckets, one per key (a submitter's token
// accessor), each made with the rate and burst its first use names and
// made again, full, when they change. The zero value is ready to use.
type Limiter struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// Reserve takes one token from key's bucket of r tokens per second and
// burst at now and returns 0, or, past the bucket, how long until a
// token is there (and takes nothing).
func (l *Limiter) Reserve(key string, r float64, burst int, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil || b.Limit() != rate.Limit(r) || b.Burst() != burst {
		if l.buckets == nil {
			l.buckets = map[string]*rate.Limiter{}
		}
		if len(l.buckets) >= MaxBuckets {
			for k, v := range l.buckets {
				if v.TokensAt(now) >= float64(v.Burst()) {
					delete(l.buckets, k)
				}
			}
		}
		b = rate.NewLimiter(rate.Limit(r), burst)
		l.buckets[key] = b
	}
	res := b.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 || !res.OK() {
		res.CancelAt(now)
		if !res.OK() {
			return time.Duration(float64(time.Second) / max(r, 1e-9))
		}
		return d
	}
	return 0
}

// Reset drops every bucket (they start full again).
func (l *Limiter) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.buckets)
}
