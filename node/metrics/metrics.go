// Package metrics holds one node's Prometheus collectors: requests,
// latencies, tokens and cost, upstream attempts, ejections, probes,
// forwards, hand-offs, residency refusals and stored responses' copies.
// They are created per node on an injected prometheus.Registerer, never
// the global one; the node tells them what happened through the methods
// here. Names, labels and help text are part of the operator's interface
// (alerts and the dashboard in deploy/ read them).
package metrics

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/llmesh/llmesh/route"
)

// Metrics are one node's Prometheus collectors, registered on the node's
// own registry (never the global one). Labels are bounded: models and
// providers come from the catalog (a model the catalog does not know is
// counted as "unknown"), tenants from the configuration, codes and outcomes
// from small fixed sets.
type Metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	ttft          *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	cachedTokens  *prometheus.CounterVec
	cost          *prometheus.CounterVec
	inFlight      prometheus.Gauge
	attempts      *prometheus.CounterVec
	attemptTime   *prometheus.HistogramVec
	ejections     *prometheus.CounterVec
	truncated     *prometheus.CounterVec
	countedTokens *prometheus.CounterVec
	probes        *prometheus.CounterVec
	probeCost     *prometheus.CounterVec
	probeTokens   *prometheus.CounterVec
	raftApply     prometheus.Histogram
	admissionWait prometheus.Histogram
	forwardsIn    prometheus.Counter
	forwardsOut   prometheus.Counter
	handoffs      *prometheus.CounterVec
	refusals      *prometheus.CounterVec
	fallbackMetrics
	cacheMetrics
	storedMetrics
}

// latencyBuckets returns buckets spanning a cached answer (5 ms) to a long generation (5 min).
func latencyBuckets() []float64 {
	return []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
}

// New creates a node's collectors and registers them on reg, with the Go
// runtime and process collectors. It panics if reg already holds any of
// them, as prometheus.MustRegister does: each node has its own registry.
func New(reg prometheus.Registerer) *Metrics {
	f := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	m := &Metrics{
		requests: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_requests_total",
			Help: "API requests answered, by endpoint (chat, embeddings, completions, messages), model, provider that answered (empty if none; cache for an answer from the response cache) and HTTP status.",
		}, []string{"endpoint", "model", "provider", "code"})).(*prometheus.CounterVec),
		duration: f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llmesh_request_duration_seconds", Buckets: latencyBuckets(),
			Help: "Time from a request's arrival to its last byte, by endpoint, model and whether it streamed.",
		}, []string{"endpoint", "model", "stream"})).(*prometheus.HistogramVec),
		ttft: f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llmesh_time_to_first_token_seconds", Buckets: latencyBuckets(),
			Help: "Time from a streamed request's arrival to its first event, by model and provider.",
		}, []string{"model", "provider"})).(*prometheus.HistogramVec),
		tokens: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_tokens_total",
			Help: "Tokens processed, by model, provider and direction (prompt or completion).",
		}, []string{"model", "provider", "direction"})).(*prometheus.CounterVec),
		// Cached tokens are a part of the prompt's, so a counter of their
		// own rather than a direction of llmesh_tokens_total, whose sum
		// would count them twice. The hit ratio is
		// rate(llmesh_prompt_cached_tokens_total) / rate(llmesh_tokens_total{direction="prompt"}).
		cachedTokens: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_prompt_cached_tokens_total",
			Help: "Prompt tokens the provider served from its prompt cache (a part of llmesh_tokens_total's prompt tokens), as its usage reported them, by model and provider.",
		}, []string{"model", "provider"})).(*prometheus.CounterVec),
		cost: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_cost_usd_total",
			Help: "Spend in US dollars at the configured prices, by tenant, model and provider.",
		}, []string{"tenant", "model", "provider"})).(*prometheus.CounterVec),
		forwardsIn: f(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmesh_forwards_received_total",
			Help: "Requests other nodes forwarded here to serve with this node's providers.",
		})).(prometheus.Counter),
		forwardsOut: f(prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmesh_forwards_sent_total",
			Help: "Requests this node forwarded to a node that can reach their provider.",
		})).(prometheus.Counter),
		handoffs: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_handoffs_total",
			Help: "Requests that reached this node while it drained, by what became of them: ok (a peer served it), refused (a peer's final refusal, relayed), next (a peer could not take it; the next was tried), self (no peer took it; this node served it).",
		}, []string{"outcome"})).(*prometheus.CounterVec),
		refusals: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_residency_refusals_total",
			Help: "Client requests this node refused to keep data where its residency allows, by reason: no_compliant_provider (no provider, or no path, in the jurisdiction could serve it) or header (X-LLMesh-Residency would widen the tenant's).",
		}, []string{"reason"})).(*prometheus.CounterVec),
		inFlight: f(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmesh_requests_in_flight",
			Help: "Chat completion requests being served.",
		})).(prometheus.Gauge),
		attempts: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_upstream_attempts_total",
			Help: "Calls to providers, by provider and outcome (ok, rate_limited, http_error, connect_error, timeout, bad_response, broken_stream, refused, canceled, and blocked: a target the residency guard refused, which should never happen).",
		}, []string{"provider", "outcome"})).(*prometheus.CounterVec),
		attemptTime: f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llmesh_upstream_attempt_duration_seconds", Buckets: latencyBuckets(),
			Help: "Duration of calls to providers, by provider.",
		}, []string{"provider"})).(*prometheus.HistogramVec),
		ejections: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_provider_ejections_total",
			Help: "Times the outlier detector ejected a provider.",
		}, []string{"provider"})).(*prometheus.CounterVec),
		truncated: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_streams_truncated_total",
			Help: "Streams that broke after their first byte, by provider.",
		}, []string{"provider"})).(*prometheus.CounterVec),
		countedTokens: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_usage_counted_total",
			Help: "Answers whose provider reported no usage, so the node counted the tokens itself.",
		}, []string{"provider"})).(*prometheus.CounterVec),
		probes: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_probes_total",
			Help: "Active health probes (one-token requests to idle providers), by provider and outcome.",
		}, []string{"provider", "outcome"})).(*prometheus.CounterVec),
		probeCost: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_probe_cost_usd_total",
			Help: "What active health probes cost, in US dollars at the configured prices, by provider.",
		}, []string{"provider"})).(*prometheus.CounterVec),
		probeTokens: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_probe_tokens_total",
			Help: "Tokens spent by active health probes, by provider.",
		}, []string{"provider"})).(*prometheus.CounterVec),
		admissionWait: f(prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llmesh_admission_wait_seconds", Buckets: []float64{.0001, .0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
			Help: "Time a request waited for budget escrow or a rate share before it was sent or refused (zero for most).",
		})).(prometheus.Histogram),
		raftApply: f(prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llmesh_raft_apply_duration_seconds", Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
			Help: "Time for a ledger command to commit and apply on this voter while it leads.",
		})).(prometheus.Histogram),
	}
	m.fallbackMetrics = newFallbackMetrics(f)
	m.cacheMetrics = newCacheMetrics(f)
	m.storedMetrics = newStoredMetrics(f)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

var _ route.Observer = (*Metrics)(nil)

// Attempt implements route.Observer.
func (m *Metrics) Attempt(provider string, o route.Outcome, d time.Duration) {
	m.attempts.WithLabelValues(provider, string(o)).Inc()
	m.attemptTime.WithLabelValues(provider).Observe(d.Seconds())
}

// Refused counts err when it refused a client's request for its
// residency. Only the node that answers the client counts it: a far
// node's refusal of a forward is the origin's to count, once, if no other
// target serves the request.
func (m *Metrics) Refused(err error) {
	if errors.Is(err, route.ErrNoCompliantProvider) {
		m.refusals.WithLabelValues("no_compliant_provider").Inc()
	}
}

// RefusedHeader counts a client's request refused because its
// X-LLMesh-Residency header would widen the tenant's residency.
func (m *Metrics) RefusedHeader() { m.refusals.WithLabelValues("header").Inc() }

// Ejected counts the outlier detector's ejection of provider.
func (m *Metrics) Ejected(provider string) { m.ejections.WithLabelValues(provider).Inc() }

// RaftApplied observes the time a ledger command took to commit and
// apply on this voter while it leads.
func (m *Metrics) RaftApplied(d time.Duration) { m.raftApply.Observe(d.Seconds()) }

// HandedOff counts what became of a request that reached the node while
// it drained: ok, refused, next or self (llmesh_handoffs_total's help
// says what each means).
func (m *Metrics) HandedOff(outcome string) { m.handoffs.WithLabelValues(outcome).Inc() }

// Probed counts an active health probe of provider, its outcome, and
// what it cost.
func (m *Metrics) Probed(provider, outcome string, res *route.Result) {
	m.probes.WithLabelValues(provider, outcome).Inc()
	m.probeCost.WithLabelValues(provider).Add(res.Cost)
	m.probeTokens.WithLabelValues(provider).Add(float64(res.Usage.PromptTokens + res.Usage.CompletionTokens))
}

// InFlight is the gauge of requests being served: the node raises it
// when a request arrives and lowers it when the request is answered.
func (m *Metrics) InFlight() prometheus.Gauge { return m.inFlight }

// ForwardsReceived counts the requests peers forwarded here.
func (m *Metrics) ForwardsReceived() prometheus.Counter { return m.forwardsIn }

// ForwardsSent counts the requests this node forwarded to a peer.
func (m *Metrics) ForwardsSent() prometheus.Counter { return m.forwardsOut }

// Request is one finished request, as the node answered it.
type Request struct {
	// Tenant, Model and Provider label the request ("unknown" for a
	// model the catalog does not know; Provider "" if none answered).
	Tenant, Model, Provider string
	// Endpoint is the API's name (route.API.String).
	Endpoint string
	Status   int
	Stream   bool
	// Took is from the request's arrival to its last byte.
	Took time.Duration
	// Result is nil when the request never got a plan.
	Result *route.Result
}

// Answered counts one finished request. Tokens and cost count on the
// node that called the provider (a Result whose target was reached
// through a peer counts neither), so a forwarded request is not counted
// twice.
func (m *Metrics) Answered(r Request) {
	m.requests.WithLabelValues(r.Endpoint, r.Model, r.Provider, strconv.Itoa(r.Status)).Inc()
	m.duration.WithLabelValues(r.Endpoint, r.Model, strconv.FormatBool(r.Stream)).Observe(r.Took.Seconds())
	res := r.Result
	if res == nil {
		return
	}
	m.admissionWait.Observe(res.AdmissionWait.Seconds())
	m.countFallbacks(res)
	if res.Target == nil {
		return
	}
	if res.Target.Via == "" {
		u := res.Usage
		m.tokens.WithLabelValues(r.Model, r.Provider, "prompt").Add(float64(u.PromptTokens))
		m.tokens.WithLabelValues(r.Model, r.Provider, "completion").Add(float64(u.CompletionTokens))
		m.cachedTokens.WithLabelValues(r.Model, r.Provider).Add(float64(u.CachedTokens))
		m.cost.WithLabelValues(r.Tenant, r.Model, r.Provider).Add(res.Cost)
	}
	if r.Stream {
		m.ttft.WithLabelValues(r.Model, r.Provider).Observe(res.TTFT.Seconds())
	}
	if res.Truncated {
		m.truncated.WithLabelValues(r.Provider).Inc()
	}
	if res.UsageCounted {
		m.countedTokens.WithLabelValues(r.Provider).Inc()
	}
}
