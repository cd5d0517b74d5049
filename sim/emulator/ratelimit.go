package emulator

import (
	"math"
	"sync"
	"time"
)

// bucket is the requests-per-minute limit: a token bucket of capacity rpm
// refilled at rpm per minute, starting full.
type bucket struct {
	mu     sync.Mutex
	rpm    int // 0: unlimited
	tokens float64
	last   time.Time
}

// verdict is the outcome of one take, with what the x-ratelimit-* and
// Retry-After headers say.
type verdict struct {
	ok        bool
	limit     int           // x-ratelimit-limit-requests
	remaining int           // x-ratelimit-remaining-requests
	reset     time.Duration // x-ratelimit-reset-requests: until the bucket is full
	retry     time.Duration // until one request is allowed; 0 when ok
}

// setRPM changes the limit, keeping what is left of the bucket (capped at
// the new capacity); a bucket that was unlimited starts full.
func (b *bucket) setRPM(rpm int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rpm > 0 {
		b.refill(now)
	} else {
		b.tokens = float64(rpm)
	}
	b.rpm = rpm
	b.tokens = min(b.tokens, float64(rpm))
	b.last = now
}

// take spends one request if the bucket holds one. An unlimited bucket
// answers ok with limit 0.
func (b *bucket) take(now time.Time) verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rpm == 0 {
		return verdict{ok: true}
	}
	b.refill(now)
	v := verdict{limit: b.rpm}
	if b.tokens >= 1 {
		b.tokens--
		v.ok = true
	} else {
		v.retry = b.after(1 - b.tokens)
	}
	v.remaining = int(b.tokens)
	v.reset = b.after(float64(b.rpm) - b.tokens)
	return v
}

func (b *bucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(float64(b.rpm), b.tokens+elapsed.Minutes()*float64(b.rpm))
		b.last = now
	}
}

// after is how long refilling n requests takes.
func (b *bucket) after(n float64) time.Duration {
	return time.Duration(math.Ceil(n / float64(b.rpm) * float64(time.Minute)))
}

// resetString formats d as OpenAI's x-ratelimit-reset-* headers do: a Go
// duration rounded up to the millisecond, such as "1s", "120ms" or "6m0s".
func resetString(d time.Duration) string {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond).String()
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}
