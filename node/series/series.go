// Package series keeps a node's last minutes of traffic as per-second
// samples — requests, errors, latency, TTFT, cost and prompt tokens
// (and how many of them the provider's cache served) per provider, per
// tenant and per peer forwarded to — from which the dashboard draws its
// charts and its mesh map, with no external service.
//
// Each key has a fixed ring of Window one-second slots, stamped with
// their second so that a slot not written for a while reads as zero:
// memory is bounded by MaxKeys rings, and recording is a map lookup and
// a few additions under a mutex, nothing allocated once a key exists.
//
// The package imports node/views only.
package series

import (
	"sync"
	"time"

	"github.com/llmesh/llmesh/node/views"
)

// Window is how many seconds a ring keeps: ten minutes.
const Window = 600

// MaxKeys bounds the rings kept. Keys come from configuration (providers,
// tenants) and gossip (peers); past the bound a new key is counted under
// Other.
const MaxKeys = 512

// Other keys what came past MaxKeys.
const Other = "(other)"

// Kind is what a key names.
type Kind uint8

// Kinds of key.
const (
	Provider Kind = iota
	Tenant
	Forward
)

// Observation is one answered request.
type Observation struct {
	// Provider served it ("" when none did), Tenant sent it, Via is the
	// peer it was forwarded to ("" when this node called the provider).
	Provider, Tenant, Via string
	Error                 bool          // answered with a status of 400 or more
	Latency               time.Duration // until the answer ended
	TTFT                  time.Duration // until the first token of a stream; 0 otherwise
	CostUSD               float64
	// PromptTokens and CachedTokens are the answer's prompt tokens and
	// those the provider served from its prompt cache, as the provider
	// reported them (both 0 when it reported no usage).
	PromptTokens, CachedTokens int
}

type key struct {
	kind Kind
	name string
}

type slot struct {
	sec               int64
	requests, errors  int32
	ttftN             int32
	latencyMs, ttftMs float64
	costUSD           float64
	prompt, cached    int64
}

type ring [Window]slot

// Ring is a node's series. The zero value is not ready: use New.
type Ring struct {
	mu   sync.Mutex
	keys map[key]*ring
}

// New returns an empty series.
func New() *Ring { return &Ring{keys: map[key]*ring{}} }

// Record counts o in the second of now.
func (r *Ring) Record(now time.Time, o Observation) {
	sec := now.Unix()
	provider := o.Provider
	if provider == "" {
		provider = views.Refused
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(key{Provider, provider}, sec, o)
	if o.Tenant != "" {
		r.add(key{Tenant, o.Tenant}, sec, o)
	}
	if o.Via != "" {
		r.add(key{Forward, o.Via}, sec, o)
	}
}

func (r *Ring) add(k key, sec int64, o Observation) {
	g := r.keys[k]
	if g == nil && len(r.keys) >= MaxKeys {
		k.name = Other // one more ring per kind at most
		g = r.keys[k]
	}
	if g == nil {
		g = new(ring)
		r.keys[k] = g
	}
	s := &g[sec%Window]
	if s.sec != sec {
		*s = slot{sec: sec}
	}
	s.requests++
	if o.Error {
		s.errors++
	}
	s.latencyMs += float64(o.Latency.Microseconds()) / 1000
	if o.TTFT > 0 {
		s.ttftN++
		s.ttftMs += float64(o.TTFT.Microseconds()) / 1000
	}
	s.costUSD += o.CostUSD
	s.prompt += int64(o.PromptTokens)
	s.cached += int64(o.CachedTokens)
}

// Last returns the last seconds samples up to now (at most Window),
// oldest first.
func (r *Ring) Last(now time.Time, seconds int) views.Series {
	seconds = max(1, min(seconds, Window))
	end := now.Unix()
	out := views.Series{End: end, Seconds: seconds,
		Providers: map[string]views.Samples{}, Tenants: map[string]views.Samples{}, Forwards: map[string]views.Samples{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, g := range r.keys {
		s, any := g.samples(end, seconds)
		if !any {
			continue
		}
		switch k.kind {
		case Provider:
			out.Providers[k.name] = s
		case Tenant:
			out.Tenants[k.name] = s
		case Forward:
			out.Forwards[k.name] = s
		}
	}
	return out
}

// samples reads the seconds up to end; any is false when all are zero.
func (g *ring) samples(end int64, seconds int) (out views.Samples, any bool) {
	from := end - int64(seconds) + 1
	var s views.Samples
	ints := func(p *[]int, i, v int) {
		if v == 0 {
			return
		}
		if *p == nil {
			*p = make([]int, seconds)
		}
		(*p)[i] = v
	}
	floats := func(p *[]float64, i int, v float64) {
		if v == 0 {
			return
		}
		if *p == nil {
			*p = make([]float64, seconds)
		}
		(*p)[i] = v
	}
	for sec := from; sec <= end; sec++ {
		sl := &g[sec%Window]
		if sl.sec != sec || sl.requests == 0 {
			continue
		}
		any = true
		i := int(sec - from)
		ints(&s.Requests, i, int(sl.requests))
		ints(&s.Errors, i, int(sl.errors))
		floats(&s.LatencyMsSum, i, sl.latencyMs)
		ints(&s.TTFTCount, i, int(sl.ttftN))
		floats(&s.TTFTMsSum, i, sl.ttftMs)
		floats(&s.CostUSD, i, sl.costUSD)
		ints(&s.PromptTokens, i, int(sl.prompt))
		ints(&s.CachedTokens, i, int(sl.cached))
	}
	return s, any
}

// Merge adds src into dst sample by sample, aligned on their ends: the
// mesh's series is the sum of its nodes'. dst keeps its own end and
// length; src's samples outside them are dropped (a peer's clock a
// second apart shifts its samples by one).
func Merge(dst *views.Series, src views.Series) {
	shift := int(dst.End - src.End) // src's sample i is dst's i - shift
	add := func(into map[string]views.Samples, from map[string]views.Samples) {
		for name, s := range from {
			d := into[name]
			d.Requests = addInto(d.Requests, s.Requests, shift, dst.Seconds, src.Seconds)
			d.Errors = addInto(d.Errors, s.Errors, shift, dst.Seconds, src.Seconds)
			d.LatencyMsSum = addInto(d.LatencyMsSum, s.LatencyMsSum, shift, dst.Seconds, src.Seconds)
			d.TTFTCount = addInto(d.TTFTCount, s.TTFTCount, shift, dst.Seconds, src.Seconds)
			d.TTFTMsSum = addInto(d.TTFTMsSum, s.TTFTMsSum, shift, dst.Seconds, src.Seconds)
			d.CostUSD = addInto(d.CostUSD, s.CostUSD, shift, dst.Seconds, src.Seconds)
			d.PromptTokens = addInto(d.PromptTokens, s.PromptTokens, shift, dst.Seconds, src.Seconds)
			d.CachedTokens = addInto(d.CachedTokens, s.CachedTokens, shift, dst.Seconds, src.Seconds)
			if d.Requests != nil {
				into[name] = d
			}
		}
	}
	if dst.Providers == nil {
		dst.Providers, dst.Tenants, dst.Forwards = map[string]views.Samples{}, map[string]views.Samples{}, map[string]views.Samples{}
	}
	add(dst.Providers, src.Providers)
	add(dst.Tenants, src.Tenants)
	add(dst.Forwards, src.Forwards)
}

// addInto adds s (sn long, its end shift seconds before d's) into d (dn
// long), allocating d when s has a sample inside it.
func addInto[T int | float64](d, s []T, shift, dn, sn int) []T {
	for i, v := range s {
		j := i + (dn - sn) - shift
		if v == 0 || j < 0 || j >= dn {
			continue
		}
		if d == nil {
			d = make([]T, dn)
		}
		d[j] += v
	}
	return d
}
