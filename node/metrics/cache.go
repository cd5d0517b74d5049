package metrics

import "github.com/prometheus/client_golang/prometheus"

// cacheMetrics count the response cache's lookups and what it holds.
type cacheMetrics struct {
	cacheRequests *prometheus.CounterVec
	cacheBytes    prometheus.Gauge
}

func newCacheMetrics(f func(prometheus.Collector) prometheus.Collector) cacheMetrics {
	return cacheMetrics{
		cacheRequests: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_cache_requests_total",
			Help: "Client requests the response cache could serve, by result: hit (answered from the cache, no provider called), miss (sent on; stored if it completes), bypass (opted in or asked for, but not reusable: not at temperature 0, more than one choice, tools, a stateful request (a Responses request that stores or continues a response or is in a conversation, a chat completion with store: true), or X-LLMesh-Cache: off).",
		}, []string{"result"})).(*prometheus.CounterVec),
		cacheBytes: f(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmesh_cache_bytes",
			Help: "Bytes of answers the response cache holds on this node (bodies and events, with a small overhead per entry), bounded by cache.max_bytes.",
		})).(prometheus.Gauge),
	}
}

// CacheLookup counts a request the response cache could serve, by
// result (hit, miss or bypass), and sets what the cache holds.
func (m *cacheMetrics) CacheLookup(result string, bytes int64) {
	m.cacheRequests.WithLabelValues(result).Inc()
	m.cacheBytes.Set(float64(bytes))
}

// CacheBytes sets what the response cache holds.
func (m *cacheMetrics) CacheBytes(bytes int64) { m.cacheBytes.Set(float64(bytes)) }
