// Package decisions holds a node's record of each finished request (its
// routing decision: who asked, what was chosen, what became of it) and
// the ring of the last ones that the dashboard and GET
// /v1/mesh/decisions read. Recording is allocation-free; a record is
// rendered as a view only when an operator reads the ring.
package decisions

import (
	"net/http"
	"sync"
	"time"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// Kept is how many routing decisions a node remembers.
const Kept = 256

// StatusClientClosed is the status recorded (never sent) when the client
// went away.
const StatusClientClosed = 499

// Decision is one finished request, as the node answered it.
type Decision struct {
	At                                  time.Time
	ID, Tenant, Model, Provider, Origin string
	API                                 route.API
	Status                              int
	Stream                              bool
	Took                                time.Duration
	Result                              *route.Result // nil when the request never got a plan
	Err                                 error         // what the client was answered instead, if anything
	// The jurisdiction the request's data had to stay in, once known.
	Residency region.Residency
	Strict    bool
}

// Outcome sums the request up for its log line: ok, cache_hit (answered
// from the node's response cache), truncated (a stream cut after its
// first byte), client_closed, refused (a budget, rate or residency
// refusal, or a bad request), or error.
func (e *Decision) Outcome() string {
	switch status := e.Status; {
	case status == StatusClientClosed:
		return "client_closed"
	case status >= 200 && status < 300 && e.Result != nil && e.Result.Truncated:
		return "truncated"
	case status >= 200 && status < 300 && e.Result != nil && e.Result.CacheHit:
		return "cache_hit"
	case status >= 200 && status < 300:
		return "ok"
	case status >= 400 && status < 500, status == http.StatusServiceUnavailable:
		return "refused"
	}
	return "error"
}

// View renders e for the admin API. refusal explains e.Err, the error
// the client was answered with (its code and its redacted message); it
// is called only when there is one.
func (e *Decision) View(refusal func(error) string) views.Decision {
	v := views.Decision{Time: e.At, RequestID: e.ID, Endpoint: e.API.String(), Tenant: e.Tenant, Model: e.Model, Stream: e.Stream, Provider: e.Provider,
		ForwardedBy: e.Origin, Status: e.Status, Outcome: e.Outcome(), Millis: e.Took.Milliseconds(),
		Attempts: []views.AttemptView{}}
	if e.Result != nil {
		v.Replica = e.Result.Replica
		if e.Result.Target != nil {
			v.Via = e.Result.Target.Via
			u := e.Result.Usage
			v.CostUSD, v.PromptTokens, v.CachedTokens, v.CompletionTokens = e.Result.Cost, u.PromptTokens, u.CachedTokens, u.CompletionTokens
		}
		for _, a := range e.Result.Attempts {
			v.Attempts = append(v.Attempts, views.AttemptView{Provider: a.Provider, Outcome: string(a.Outcome), Status: a.Status, Millis: a.Duration.Milliseconds()})
		}
		v.Why = e.Result.Route()
	}
	if e.Err != nil {
		v.Why = refusal(e.Err)
	}
	return v
}

// Ring is a node's last routing decisions, newest last; its zero value
// is empty and ready. A request writes one entry in place under the
// mutex: nothing is allocated and nothing is rendered on the request
// path.
type Ring struct {
	mu    sync.Mutex
	ring  [Kept]Decision
	total uint64 // recorded since start; ring[total%Kept] is next
}

// Record keeps e, forgetting the oldest decision once Kept are held.
func (d *Ring) Record(e Decision) {
	d.mu.Lock()
	d.ring[d.total%Kept] = e
	d.total++
	d.mu.Unlock()
}

// Last returns up to limit decisions, newest first.
func (d *Ring) Last(limit int) []Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := int(min(uint64(limit), d.total, Kept))
	out := make([]Decision, 0, k)
	for i := range k {
		out = append(out, d.ring[(d.total-1-uint64(i))%Kept])
	}
	return out
}
