package route

import (
	"testing"
	"time"
)

func TestTrackerEjectsAndProbes(t *testing.T) {
	cfg := DefaultHealthConfig()
	cfg.EjectAfter, cfg.BaseEjection, cfg.MaxEjection = 3, 10*time.Second, 25*time.Second
	var ejected []string
	tr := NewTracker(cfg, TrackerHooks{OnEject: func(p string) { ejected = append(ejected, p) }})
	now := time.Unix(1000, 0)

	for i := range 2 {
		a, ok := tr.Acquire("p", now)
		if !ok {
			t.Fatalf("attempt %d refused before ejection", i)
		}
		tr.Failure(a, now)
	}
	if tr.Health("p", now).Ejected {
		t.Fatal("ejected after 2 failures, want 3")
	}
	// An attempt admitted before the ejection, still running.
	early, _ := tr.Acquire("p", now)
	a, _ := tr.Acquire("p", now)
	if !tr.Failure(a, now) || !tr.Health("p", now).Ejected || len(ejected) != 1 {
		t.Fatal("not ejected after 3 consecutive failures")
	}
	if _, ok := tr.Acquire("p", now.Add(9*time.Second)); ok {
		t.Fatal("admitted during the ejection")
	}
	// After the backoff exactly one probe gets through.
	later := now.Add(10 * time.Second)
	if tr.Health("p", later).Ejected {
		t.Fatal("still ejected once the backoff ended")
	}
	probe, ok := tr.Acquire("p", later)
	if !ok || !probe.probe {
		t.Fatal("probe refused")
	}
	if _, ok := tr.Acquire("p", later); ok || !tr.Health("p", later).Ejected {
		t.Fatal("a second request got through while the probe is in flight")
	}
	// The early attempt ending now neither frees the probe slot nor
	// restores the provider.
	tr.Release(early)
	tr.Success(early, 0, time.Second)
	if _, ok := tr.Acquire("p", later); ok || !tr.Health("p", later).Ejected {
		t.Fatal("an attempt admitted before the ejection changed the probe's state")
	}
	// A failed probe ejects again, for twice as long.
	tr.Failure(probe, later)
	if _, ok := tr.Acquire("p", later.Add(19*time.Second)); ok {
		t.Fatal("second ejection shorter than twice the first")
	}
	// Capped at MaxEjection.
	probe, ok = tr.Acquire("p", later.Add(20*time.Second))
	if !ok {
		t.Fatal("probe refused after the doubled backoff")
	}
	tr.Failure(probe, later.Add(20*time.Second))
	probe, ok = tr.Acquire("p", later.Add(45*time.Second))
	if !ok {
		t.Fatal("ejection not capped at MaxEjection")
	}
	// A successful probe restores the provider completely.
	tr.Success(probe, 0, time.Second)
	if h := tr.Health("p", later.Add(45*time.Second)); h.Ejected {
		t.Fatalf("after a good probe: %+v", h)
	}
	for range 2 {
		a, _ := tr.Acquire("p", later)
		tr.Failure(a, later)
	}
	if tr.Health("p", later).Ejected {
		t.Fatal("failure count not reset by the recovery")
	}
}

func TestTrackerReleaseFreesProbe(t *testing.T) {
	cfg := DefaultHealthConfig()
	cfg.EjectAfter = 1
	tr := NewTracker(cfg, TrackerHooks{})
	now := time.Unix(0, 0)
	a, _ := tr.Acquire("p", now)
	tr.Failure(a, now)
	due := now.Add(cfg.BaseEjection)
	probe, ok := tr.Acquire("p", due)
	if !ok {
		t.Fatal("probe refused")
	}
	tr.Release(probe) // the client went away: says nothing about health
	if _, ok := tr.Acquire("p", due); !ok {
		t.Fatal("probe slot not freed by Release")
	}
}

func TestTrackerRateLimitIsNotAFailure(t *testing.T) {
	cfg := DefaultHealthConfig()
	cfg.EjectAfter = 2
	tr := NewTracker(cfg, TrackerHooks{})
	now := time.Unix(0, 0)
	for range 5 {
		a, _ := tr.Acquire("p", now)
		tr.RateLimited(a, 3*time.Second, now)
		now = now.Add(3 * time.Second)
	}
	now = now.Add(-3 * time.Second)
	h := tr.Health("p", now)
	if h.Ejected || h.ErrorRate != 0 {
		t.Fatalf("429s counted as failures: %+v", h)
	}
	if _, ok := tr.Acquire("p", now.Add(2*time.Second)); !h.CoolingUntil.Equal(now.Add(3*time.Second)) || ok {
		t.Fatalf("cooldown not honoured: %+v", h)
	}
	if _, ok := tr.Acquire("p", now.Add(3*time.Second)); !ok {
		t.Fatal("still cooling after Retry-After passed")
	}
	if got := tr.RateLimited(Admission{provider: "q"}, 0, now); got != cfg.DefaultCooldown || tr.Health("q", now).CoolingUntil.Sub(now) != got {
		t.Fatalf("default cooldown %v, want %v", got, cfg.DefaultCooldown)
	}
	if got := tr.RateLimited(Admission{provider: "p"}, time.Hour*100, now); got != cfg.MaxCooldown || tr.Health("p", now).CoolingUntil.Sub(now) != got {
		t.Fatalf("cooldown %v not capped at %v", got, cfg.MaxCooldown)
	}
}

func TestLimiter(t *testing.T) {
	l := NewLimiter([]*Provider{{Name: "p", RPM: 60, TPM: 1000}, {Name: "free"}})
	now := time.Unix(0, 0)
	if ok, _ := l.Take("free", 1e9, now); !ok {
		t.Fatal("unlimited provider refused")
	}
	for i := range 60 {
		if ok, _ := l.Take("p", 10, now); !ok {
			t.Fatalf("request %d of 60 refused", i)
		}
	}
	ok, wait := l.Take("p", 10, now)
	if ok || wait != time.Second {
		t.Fatalf("61st request: ok=%v wait=%v, want refused for 1s", ok, wait)
	}
	if ok, _ := l.Allow("p", 10, now.Add(time.Second)); !ok {
		t.Fatal("not refilled after 1s")
	}
	// Tokens: 400 left, ~417 after a second; 500 needs ~83 more: 5s.
	if ok, wait := l.Allow("p", 500, now.Add(time.Second)); ok || wait < 4900*time.Millisecond || wait > 5100*time.Millisecond {
		t.Fatalf("token bucket: ok=%v wait=%v", ok, wait)
	}
	l.Return("p", 600, now.Add(time.Second))
	if ok, _ := l.Take("p", 500, now.Add(time.Second)); !ok {
		t.Fatal("returned tokens not available")
	}
	// A request larger than a minute's tokens passes when the bucket is
	// full and leaves it in debt.
	full := now.Add(time.Hour)
	if ok, _ := l.Take("p", 5000, full); !ok {
		t.Fatal("oversized request refused on a full bucket")
	}
	if ok, _ := l.Allow("p", 1, full.Add(time.Minute)); ok {
		t.Fatal("debt not carried")
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    map[string]string
		want time.Duration
	}{
		{map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http1Time)}, 7 * time.Second},
		{map[string]string{"X-Ratelimit-Reset-Requests": "6m0s"}, 6 * time.Minute},
		{map[string]string{"X-Ratelimit-Reset-Tokens": "20ms"}, 20 * time.Millisecond},
		{map[string]string{"Retry-After": "soon"}, 0},
		{nil, 0},
	} {
		h := make(map[string][]string)
		for k, v := range tc.h {
			h[k] = []string{v}
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.h, got, tc.want)
		}
	}
}

const http1Time = "Mon, 02 Jan 2006 15:04:05 GMT"
