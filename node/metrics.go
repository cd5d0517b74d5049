package node

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/llmesh/llmesh/route"
)

// metrics are one node's Prometheus collectors, registered on the node's
// own registry (never the global one). Labels are bounded: models and
// providers come from the catalog (a model the catalog does not know is
// counted as "unknown"), tenants from the configuration, codes and outcomes
// from small fixed sets.
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	ttft          *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
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
}

// latencyBuckets span a cached answer (5 ms) to a long generation (5 min).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := func(c prometheus.Collector) prometheus.Collector { reg.MustRegister(c); return c }
	m := &metrics{
		requests: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_requests_total",
			Help: "Chat completion requests answered, by model, provider that answered (empty if none) and HTTP status.",
		}, []string{"model", "provider", "code"})).(*prometheus.CounterVec),
		duration: f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llmesh_request_duration_seconds", Buckets: latencyBuckets,
			Help: "Time from a request's arrival to its last byte, by model and whether it streamed.",
		}, []string{"model", "stream"})).(*prometheus.HistogramVec),
		ttft: f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llmesh_time_to_first_token_seconds", Buckets: latencyBuckets,
			Help: "Time from a streamed request's arrival to its first event, by model and provider.",
		}, []string{"model", "provider"})).(*prometheus.HistogramVec),
		tokens: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_tokens_total",
			Help: "Tokens processed, by model, provider and direction (prompt or completion).",
		}, []string{"model", "provider", "direction"})).(*prometheus.CounterVec),
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
			Name: "llmesh_upstream_attempt_duration_seconds", Buckets: latencyBuckets,
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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Attempt implements route.Observer.
func (m *metrics) Attempt(provider string, o route.Outcome, d time.Duration) {
	m.attempts.WithLabelValues(provider, string(o)).Inc()
	m.attemptTime.WithLabelValues(provider).Observe(d.Seconds())
}

// refused counts err when it refused a client's request for its
// residency. Only the node that answers the client counts it: a far
// node's refusal of a forward is the origin's to count, once, if no other
// target serves the request.
func (m *metrics) refused(err error) {
	if errors.Is(err, route.ErrNoCompliantProvider) {
		m.refusals.WithLabelValues("no_compliant_provider").Inc()
	}
}
