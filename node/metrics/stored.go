package metrics

import "github.com/prometheus/client_golang/prometheus"

// CopyOutcomes are what became of a stored response's copy to a peer,
// llmesh_stored_response_copies_total's outcome label.
var CopyOutcomes = []string{"kept", "refused", "failed", "no_peer", "too_large", "gone", "dropped"}

// storedMetrics count the copies of stored Responses API responses sent
// to peers, and what the store holds.
type storedMetrics struct {
	storedCopies *prometheus.CounterVec
	storedBytes  prometheus.Gauge
}

func newStoredMetrics(f func(prometheus.Collector) prometheus.Collector) storedMetrics {
	m := storedMetrics{
		storedCopies: f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_stored_response_copies_total",
			Help: "Copies of the Responses API responses this node recorded, sent to one peer each off the request path, by outcome: kept (a peer holds it), refused (the peer may not hold it, or is older than copies), failed (no peer answered), no_peer (no live peer the tenant's residency allows), too_large (over limits.max_body_bytes), gone (deleted or evicted before its turn), dropped (the queue of copies was full).",
		}, []string{"outcome"})).(*prometheus.CounterVec),
		storedBytes: f(prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmesh_stored_responses_bytes",
			Help: "Bytes of stored Responses API responses held on this node, its own and the copies it holds for peers (bridged conversations and Response objects, with a small overhead per response), bounded by limits.stored_responses_bytes.",
		})).(prometheus.Gauge),
	}
	for _, o := range CopyOutcomes {
		m.storedCopies.WithLabelValues(o)
	}
	return m
}

// StoredCopy counts what became of a stored response's copy: one of
// CopyOutcomes.
func (m *storedMetrics) StoredCopy(outcome string) { m.storedCopies.WithLabelValues(outcome).Inc() }

// StoredBytes sets what the stored responses hold.
func (m *storedMetrics) StoredBytes(bytes int) { m.storedBytes.Set(float64(bytes)) }
