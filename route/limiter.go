package route

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// QuotaGate admits attempts against a provider's request and token rates.
// On one node the Limiter holds the whole configured rate; in a mesh the
// node's lease of the global rate plugs in instead.
type QuotaGate interface {
	// Allow reports whether an attempt costing tokens could be taken now
	// and, if not, how long until it could. It takes nothing.
	Allow(provider string, tokens int, now time.Time) (bool, time.Duration)
	// Take takes one request and tokens if both are available.
	Take(provider string, tokens int, now time.Time) (bool, time.Duration)
	// Return gives back tokens taken but not used (an estimate larger than
	// the actual usage, or an attempt that never reached the provider); a
	// negative count takes what an attempt used beyond its estimate.
	Return(provider string, tokens int, now time.Time)
}

// Limiter enforces each provider's requests and tokens per minute with two
// token buckets, each holding up to one minute's worth. A request asking
// for more tokens than a whole minute allows passes only when the bucket is
// full, and leaves it in debt: it is served, and later requests wait.
type Limiter struct {
	buckets atomic.Pointer[map[string]*rateBuckets] // replaced whole by SetProviders
}

type rateBuckets struct {
	mu       sync.Mutex
	req, tok bucket
}

type bucket struct {
	perMinute float64 // 0 = unlimited
	level     float64
	last      time.Time
}

// NewLimiter returns a Limiter for providers' RPM and TPM.
func NewLimiter(providers []*Provider) *Limiter {
	l := &Limiter{}
	l.SetProviders(providers)
	return l
}

// SetProviders follows a reload of the providers: a provider whose rates
// did not change keeps its buckets (and what they hold); one whose rates
// changed keeps what its buckets held, up to the new limits; a new one
// starts full.
func (l *Limiter) SetProviders(providers []*Provider) {
	old := map[string]*rateBuckets{}
	if m := l.buckets.Load(); m != nil {
		old = *m
	}
	m := map[string]*rateBuckets{}
	for _, p := range providers {
		if p.RPM == 0 && p.TPM == 0 {
			continue
		}
		b := old[p.Name]
		if b != nil && b.req.perMinute == float64(p.RPM) && b.tok.perMinute == float64(p.TPM) {
			m[p.Name] = b
			continue
		}
		nb := &rateBuckets{
			req: bucket{perMinute: float64(p.RPM), level: float64(p.RPM)},
			tok: bucket{perMinute: float64(p.TPM), level: float64(p.TPM)},
		}
		if b != nil {
			// What was taken in the last minute still counts: a lowered
			// limit must not admit a fresh minute's worth at once.
			b.mu.Lock()
			nb.req.level, nb.req.last = math.Min(b.req.level, nb.req.perMinute), b.req.last
			nb.tok.level, nb.tok.last = math.Min(b.tok.level, nb.tok.perMinute), b.tok.last
			b.mu.Unlock()
		}
		m[p.Name] = nb
	}
	l.buckets.Store(&m)
}

func (b *bucket) refill(now time.Time) {
	if b.perMinute == 0 {
		return
	}
	if !b.last.IsZero() && now.After(b.last) {
		b.level = math.Min(b.perMinute, b.level+now.Sub(b.last).Minutes()*b.perMinute)
	}
	if now.After(b.last) {
		b.last = now
	}
}

// wait returns how long until n units are available (0 if they are now).
func (b *bucket) wait(n float64) time.Duration {
	if b.perMinute == 0 || b.level >= n || (n > b.perMinute && b.level >= b.perMinute) {
		return 0
	}
	need := math.Min(n, b.perMinute) - b.level
	return time.Duration(need / b.perMinute * float64(time.Minute))
}

func (l *Limiter) check(provider string, tokens int, now time.Time, take bool) (bool, time.Duration) {
	b := (*l.buckets.Load())[provider]
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.req.refill(now)
	b.tok.refill(now)
	if w := max(b.req.wait(1), b.tok.wait(float64(tokens))); w > 0 {
		return false, w
	}
	if take {
		if b.req.perMinute > 0 {
			b.req.level--
		}
		if b.tok.perMinute > 0 {
			b.tok.level -= float64(tokens)
		}
	}
	return true, 0
}

// Allow implements QuotaGate.
func (l *Limiter) Allow(provider string, tokens int, now time.Time) (bool, time.Duration) {
	return l.check(provider, tokens, now, false)
}

// Take implements QuotaGate.
func (l *Limiter) Take(provider string, tokens int, now time.Time) (bool, time.Duration) {
	return l.check(provider, tokens, now, true)
}

// Return implements QuotaGate.
func (l *Limiter) Return(provider string, tokens int, now time.Time) {
	b := (*l.buckets.Load())[provider]
	if b == nil || b.tok.perMinute == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tok.refill(now)
	b.tok.level = math.Min(b.tok.perMinute, b.tok.level+float64(tokens))
}
