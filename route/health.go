package route

import (
	"slices"
	"sync"
	"time"
)

// Health is what is known of a provider's condition at one instant.
type Health struct {
	// Ejected means the outlier detector has taken the provider out of
	// rotation: no traffic until its backoff ends and a probe succeeds.
	Ejected bool
	// CoolingUntil is when a 429 cooldown ends; zero when there is none.
	CoolingUntil time.Time
	// TTFT and Latency are moving averages of the time to the first
	// streamed token and of the time to a whole non-streamed answer;
	// zero when nothing has been observed yet.
	TTFT, Latency time.Duration
	// ErrorRate is a moving average of failed attempts, 0 to 1.
	ErrorRate float64
	// LastOK is when this node last had a good answer from the provider;
	// zero if never.
	LastOK time.Time
	// Degraded means other nodes of the mesh see the provider failing
	// while this node has no recent success of its own: it is ranked
	// below healthy providers rather than tried first.
	Degraded bool
	// CacheHit is the share of prompt tokens the provider served from
	// its prompt cache in this node's recent answers from it, 0 to 1
	// (Tracker.PromptCache); 0 when none reported cached tokens. The
	// planner expects that share of a prompt cached.
	CacheHit float64
}

// HealthView is the planner's read-only view of provider health. A node's
// own Tracker is one; the mesh's merged view of every node's observations
// is another.
type HealthView interface {
	Health(provider string, now time.Time) Health
}

// HealthConfig tunes outlier detection and cooldowns.
type HealthConfig struct {
	// EjectAfter is how many consecutive failures (5xx, connection errors,
	// timeouts, broken streams) eject a provider.
	EjectAfter int
	// BaseEjection is the first ejection's length; each further ejection
	// without a recovery in between doubles it, up to MaxEjection.
	BaseEjection, MaxEjection time.Duration
	// DefaultCooldown is how long a 429 without Retry-After cools a
	// provider down; MaxCooldown caps what a provider may ask for.
	DefaultCooldown, MaxCooldown time.Duration
	// Alpha is the weight of a new sample in the moving averages.
	Alpha float64
}

// DefaultHealthConfig returns the settings a node runs with.
func DefaultHealthConfig() HealthConfig {
	return HealthConfig{
		EjectAfter:      5,
		BaseEjection:    5 * time.Second,
		MaxEjection:     5 * time.Minute,
		DefaultCooldown: time.Second,
		MaxCooldown:     10 * time.Minute,
		Alpha:           0.2,
	}
}

// Tracker is a node's own record of the providers it calls: an outlier
// detector per provider (consecutive failures eject it; after a backoff a
// single probe request is let through, and its success restores the
// provider), 429 cooldowns, and moving averages of latency and errors.
// It is safe for concurrent use; time is always passed in.
type Tracker struct {
	cfg   HealthConfig
	hooks TrackerHooks

	mu sync.RWMutex
	m  map[string]*providerState
}

type providerState struct {
	mu           sync.Mutex
	failures     int       // consecutive
	ejections    int       // since the last recovery
	ejectedUntil time.Time // zero when in rotation
	probing      bool      // the half-open probe is in flight
	coolingUntil time.Time
	ttft, total  float64 // seconds; 0 = no sample yet
	errRate      float64
	lastAttempt  time.Time
	lastOK       time.Time
	// remaining requests and tokens in the provider's current rate window,
	// from its x-ratelimit-remaining-* headers; -1 when unknown.
	remainingReq, remainingTok int64
	// prompt and cached are decayed sums of answers' prompt tokens and
	// of those served from the provider's cache; their ratio is the
	// cache hit ratio.
	prompt, cached float64
}

// TrackerHooks are told of changes, outside any lock. Either may be nil.
type TrackerHooks struct {
	// OnEject is called each time a provider is ejected.
	OnEject func(provider string)
	// OnChange is called when a provider's availability changes: it is
	// ejected or restored, or a 429 starts a cooldown. Gossip uses it to
	// tell the mesh at once rather than at its next round.
	OnChange func(provider string)
}

// NewTracker returns a Tracker.
func NewTracker(cfg HealthConfig, hooks TrackerHooks) *Tracker {
	return &Tracker{cfg: cfg, hooks: hooks, m: map[string]*providerState{}}
}

func (t *Tracker) changed(provider string) {
	if t.hooks.OnChange != nil {
		t.hooks.OnChange(provider)
	}
}

func (t *Tracker) state(provider string) *providerState {
	t.mu.RLock()
	s := t.m[provider]
	t.mu.RUnlock()
	if s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s = t.m[provider]; s == nil {
		s = &providerState{remainingReq: -1, remainingTok: -1}
		t.m[provider] = s
	}
	return s
}

// Health implements HealthView.
func (t *Tracker) Health(provider string, now time.Time) Health {
	s := t.state(provider)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health(now)
}

// health reads s; s.mu is held.
func (s *providerState) health(now time.Time) Health {
	h := Health{
		Ejected:   !s.ejectedUntil.IsZero() && (now.Before(s.ejectedUntil) || s.probing),
		TTFT:      seconds(s.ttft),
		Latency:   seconds(s.total),
		ErrorRate: s.errRate,
		LastOK:    s.lastOK,
	}
	if now.Before(s.coolingUntil) {
		h.CoolingUntil = s.coolingUntil
	}
	if s.prompt > 0 {
		h.CacheHit = min(s.cached/s.prompt, 1)
	}
	return h
}

// Admission is an attempt the Tracker let through. Exactly one of
// Success, Failure, RateLimited or Release must end it.
type Admission struct {
	provider string
	// probe means the provider is ejected and this attempt is the single
	// request let through to see whether it has recovered. Only the probe's
	// outcome may restore or re-eject the provider.
	probe bool
	at    time.Time // when it was admitted
}

// Acquire is called before each attempt on provider. It refuses when the
// provider is cooling down, or ejected with its backoff still running, or
// when the backoff has ended but another request already holds the probe;
// otherwise it admits the attempt, as the probe if the provider is ejected.
func (t *Tracker) Acquire(provider string, now time.Time) (Admission, bool) {
	s := t.state(provider)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case now.Before(s.coolingUntil):
		return Admission{}, false
	case s.ejectedUntil.IsZero():
		s.lastAttempt = now
		return Admission{provider: provider, at: now}, true
	case now.Before(s.ejectedUntil) || s.probing:
		return Admission{}, false
	}
	s.probing = true
	s.lastAttempt = now
	return Admission{provider: provider, probe: true, at: now}, true
}

// Success records a good attempt: ttft is the time to the first streamed
// event (0 for a non-streamed answer), total the time to the whole answer
// (0 for a stream). A successful probe restores an ejected provider; a
// success of an attempt admitted before the ejection does not, since it
// says nothing of the provider since.
func (t *Tracker) Success(a Admission, ttft, total time.Duration) {
	s := t.state(a.provider)
	s.mu.Lock()
	restored := false
	defer func() {
		s.mu.Unlock()
		if restored {
			t.changed(a.provider)
		}
	}()
	s.errRate = ewma(s.errRate, 0, t.cfg.Alpha)
	if a.at.After(s.lastOK) {
		s.lastOK = a.at
	}
	if ttft > 0 {
		s.ttft = ewmaOrFirst(s.ttft, ttft.Seconds(), t.cfg.Alpha)
	}
	if total > 0 {
		s.total = ewmaOrFirst(s.total, total.Seconds(), t.cfg.Alpha)
	}
	if !s.ejectedUntil.IsZero() && !a.probe {
		return
	}
	restored = !s.ejectedUntil.IsZero()
	s.failures, s.ejections = 0, 0
	s.ejectedUntil = time.Time{}
	s.probing = false
}

// Failure records a failed attempt. EjectAfter consecutive failures, or a
// failed probe, eject the provider for a backoff that doubles with each
// ejection. It reports whether this failure ejected the provider.
func (t *Tracker) Failure(a Admission, now time.Time) bool {
	s := t.state(a.provider)
	s.mu.Lock()
	s.failures++
	s.errRate = ewma(s.errRate, 1, t.cfg.Alpha)
	eject := a.probe || (s.ejectedUntil.IsZero() && s.failures >= t.cfg.EjectAfter)
	if eject {
		backoff := t.cfg.BaseEjection << min(s.ejections, 20)
		if backoff > t.cfg.MaxEjection || backoff <= 0 {
			backoff = t.cfg.MaxEjection
		}
		s.ejections++
		s.ejectedUntil = now.Add(backoff)
		s.probing = false
	}
	s.mu.Unlock()
	if eject {
		if t.hooks.OnEject != nil {
			t.hooks.OnEject(a.provider)
		}
		t.changed(a.provider)
	}
	return eject
}

// RateLimited records a 429: the provider is healthy but refuses work
// until retryAfter has passed (DefaultCooldown when the answer gave none,
// at most MaxCooldown). It is not a health failure. It returns the
// cooldown applied.
func (t *Tracker) RateLimited(a Admission, retryAfter time.Duration, now time.Time) time.Duration {
	if retryAfter <= 0 {
		retryAfter = t.cfg.DefaultCooldown
	}
	retryAfter = min(retryAfter, t.cfg.MaxCooldown)
	s := t.state(a.provider)
	s.mu.Lock()
	if until := now.Add(retryAfter); until.After(s.coolingUntil) {
		s.coolingUntil = until
	}
	if a.probe {
		s.probing = false
	}
	s.mu.Unlock()
	t.changed(a.provider)
	return retryAfter
}

// CoolDown starts a cooldown the node learned of from elsewhere (a peer's
// 429), without an attempt of its own. It never shortens one.
func (t *Tracker) CoolDown(provider string, until time.Time) {
	s := t.state(provider)
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.coolingUntil) {
		s.coolingUntil = until
	}
}

// RateWindow records what a provider's x-ratelimit-remaining-requests and
// -tokens headers said; -1 leaves a figure unknown.
func (t *Tracker) RateWindow(provider string, requests, tokens int64) {
	s := t.state(provider)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remainingReq, s.remainingTok = requests, tokens
}

// PromptCache records an answer's usage as the provider reported it:
// prompt tokens, cached of them. The hit ratio (Health.CacheHit) is the
// ratio of two sums, of cached and of prompt tokens, each decayed by
// Alpha at every answer: recent answers weigh most, and a long prompt
// more than a short one, as it does in what the cache saves. Answers
// are counted, not timed, so the ratio is deterministic.
func (t *Tracker) PromptCache(provider string, prompt, cached int) {
	if prompt <= 0 {
		return
	}
	cached = min(max(cached, 0), prompt)
	s := t.state(provider)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Both sums start at zero and decay alike, so their ratio is a true
	// weighted mean from the first answer on.
	s.prompt = ewma(s.prompt, float64(prompt), t.cfg.Alpha)
	s.cached = ewma(s.cached, float64(cached), t.cfg.Alpha)
}

// ProviderState is everything the Tracker knows of one provider, for
// gossip and operators.
type ProviderState struct {
	Provider     string
	Health       Health
	EjectedUntil time.Time // zero when in rotation
	Ejections    int       // since the last recovery
	LastAttempt  time.Time // zero if never tried
	// RemainingRequests and RemainingTokens are the provider's own count
	// of what is left in its rate window; -1 when unknown.
	RemainingRequests, RemainingTokens int64
}

// Snapshot returns the state of every provider the Tracker has seen,
// sorted by name.
func (t *Tracker) Snapshot(now time.Time) []ProviderState {
	t.mu.RLock()
	names := make([]string, 0, len(t.m))
	for name := range t.m {
		names = append(names, name)
	}
	t.mu.RUnlock()
	slices.Sort(names)
	out := make([]ProviderState, 0, len(names))
	for _, name := range names {
		s := t.state(name)
		s.mu.Lock()
		out = append(out, ProviderState{
			Provider: name, Health: s.health(now), EjectedUntil: s.ejectedUntil, Ejections: s.ejections,
			LastAttempt: s.lastAttempt, RemainingRequests: s.remainingReq, RemainingTokens: s.remainingTok,
		})
		s.mu.Unlock()
	}
	return out
}

// Release ends an admitted attempt that says nothing about the provider's
// health, such as one the client abandoned. A released probe frees the
// slot for the next request.
func (t *Tracker) Release(a Admission) {
	if !a.probe {
		return
	}
	s := t.state(a.provider)
	s.mu.Lock()
	s.probing = false
	s.mu.Unlock()
}

func ewma(avg, sample, alpha float64) float64 { return avg + alpha*(sample-avg) }

func ewmaOrFirst(avg, sample, alpha float64) float64 {
	if avg == 0 {
		return sample
	}
	return ewma(avg, sample, alpha)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
