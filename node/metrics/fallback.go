package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/route"
)

// fallbackMetrics count the moves of requests past answers of a class
// their model group falls back on (groups[].fallback_on).
type fallbackMetrics struct {
	fallbacks *prometheus.CounterVec
}

func newFallbackMetrics(f func(prometheus.Collector) prometheus.Collector) fallbackMetrics {
	return fallbackMetrics{
		fallbacks: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_fallbacks_total",
			Help: "Requests moved to the next target past a provider's answer of a class their model group falls back on (fallback_on), by class (content_filter, context_length, rate_limited, server_error) and the provider that gave it.",
		}, []string{"class", "provider"})).(*prometheus.CounterVec),
	}
}

// countFallbacks counts the fallbacks a request took, on the node that
// took them.
func (m *fallbackMetrics) countFallbacks(res *route.Result) {
	for _, f := range res.Fallbacks {
		m.fallbacks.WithLabelValues(f.Class.String(), f.Provider).Inc()
	}
}
