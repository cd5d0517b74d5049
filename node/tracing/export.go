package tracing

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// gate stands in front of the SDK's batcher and holds the spans it has
// not yet exported to queueSize: a span past that is dropped and
// counted here, so the batcher (whose queue is as long) never drops one
// uncounted.
type gate struct {
	exporter *counted
	next     sdktrace.SpanProcessor
}

func (g *gate) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {}

func (g *gate) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if g.exporter.held.Add(1) > queueSize {
		g.exporter.held.Add(-1)
		g.exporter.dropped.Inc()
		return
	}
	g.next.OnEnd(s)
}

func (g *gate) Shutdown(ctx context.Context) error   { return g.next.Shutdown(ctx) }
func (g *gate) ForceFlush(ctx context.Context) error { return g.next.ForceFlush(ctx) }

// counted is the OTLP exporter with each batch counted exported or
// failed. A failed batch is logged once per outage and dropped.
type counted struct {
	next                      sdktrace.SpanExporter
	held                      atomic.Int64 // spans the gate let through and not yet exported
	exported, failed, dropped prometheus.Counter
	log                       *slog.Logger
	endpoint                  string
	failing                   atomic.Bool // the last export failed
}

func newCounted(next sdktrace.SpanExporter, cfg Config) *counted {
	spans := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmesh_trace_spans_total",
		Help: "Request spans by what became of them: exported to the collector, dropped (queue full) or failed (the collector refused or could not be reached).",
	}, []string{"outcome"})
	cfg.Registerer.MustRegister(spans)
	return &counted{next: next, log: cfg.Log, endpoint: cfg.Endpoint,
		exported: spans.WithLabelValues("exported"), failed: spans.WithLabelValues("failed"), dropped: spans.WithLabelValues("dropped")}
}

func (c *counted) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.next.ExportSpans(ctx, spans)
	c.held.Add(-int64(len(spans)))
	if err != nil {
		c.failed.Add(float64(len(spans)))
		if !c.failing.Swap(true) { // once per outage, not once a second
			c.log.Warn("could not export spans; they are dropped until the collector answers", "spans", len(spans), "endpoint", c.endpoint, "err", err)
		}
		return nil
	}
	if c.failing.Swap(false) {
		c.log.Info("exporting spans again", "endpoint", c.endpoint)
	}
	c.exported.Add(float64(len(spans)))
	return nil
}

func (c *counted) Shutdown(ctx context.Context) error { return c.next.Shutdown(ctx) }
