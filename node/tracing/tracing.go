// Package tracing makes a span per request and exports the spans to an
// OTLP/HTTP collector through the OpenTelemetry SDK.
//
// W3C trace context: a request's traceparent names its trace and the span
// that sent it. A node passes it on to the provider it calls and to the
// node it forwards through, with its own span as the parent when it
// traces, unchanged when it does not. A node that does not trace has a
// nil *Tracer, whose Begin only checks the header: no exporter, no span,
// no allocation.
//
// Spans queue in memory, at most 4,096, and go out in batches every
// second; when the collector is slow, spans are dropped and counted in
// llmesh_trace_spans_total{outcome="dropped"}, and requests never wait.
//
// The package imports no project package: it takes plain attributes.
package tracing

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config says where spans go and what they carry.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP traces URL, path included.
	Endpoint string
	// Headers are sent to the collector with every export.
	Headers map[string]string
	// Ratio is the share of the traces this node starts that are
	// sampled; a caller's sampled flag is followed.
	Ratio float64
	// Service, Node, Region and Version are the spans' resource:
	// service.name, service.instance.id, cloud.region, service.version.
	Service, Node, Region, Version string
	// Log hears of exports failing and recovering, once per outage.
	Log *slog.Logger
	// Registerer gets llmesh_trace_spans_total.
	Registerer prometheus.Registerer
}

const (
	queueSize     = 4096
	batchSize     = 512
	batchEvery    = time.Second
	exportTimeout = 10 * time.Second
	flushTimeout  = 5 * time.Second
	scope         = "github.com/llmesh/llmesh/node"
)

// Tracer makes request spans. New builds it, Start begins exporting,
// Shutdown flushes and stops. The nil Tracer traces nothing.
type Tracer struct {
	tp       *sdktrace.TracerProvider
	tracer   trace.Tracer
	exporter *counted
	started  atomic.Bool
}

// New returns a tracer exporting to cfg.Endpoint, nil when that is
// empty. It starts nothing and opens nothing.
func New(cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(cfg.Endpoint),
		otlptracehttp.WithHeaders(cfg.Headers),
		otlptracehttp.WithHTTPClient(&http.Client{Timeout: exportTimeout}),
		// A batch the collector does not take is dropped and counted, as
		// the next one is due within a second.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return nil, err
	}
	t := &Tracer{exporter: newCounted(exp, cfg)}
	t.tp = sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Ratio))),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", cfg.Service), attribute.String("service.instance.id", cfg.Node),
			attribute.String("service.version", cfg.Version), attribute.String("cloud.region", cfg.Region))))
	t.tracer = t.tp.Tracer(scope)
	return t, nil
}

// Span is one request's span on this node: the server side of a client's
// call, or of a peer's forward.
type Span struct{ s trace.Span }

// Begin starts a request's span at start. header is the caller's
// traceparent, if any; out is what to send on to providers and peers.
// Without a tracer, a valid traceparent is passed on as it came and no
// span is made; so it is when the caller does not sample. A span this
// node does not sample is nil, and out says so downstream.
func (t *Tracer) Begin(header string, start time.Time) (sp *Span, out string) {
	parent, ok := parseTraceParent(header)
	if t == nil {
		if ok {
			return nil, header
		}
		return nil, ""
	}
	if ok && !parent.sampled {
		// The caller records nothing: neither does this node, and the
		// caller's parent id travels on unchanged.
		return nil, header
	}
	ctx := context.Background()
	if ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: parent.trace, SpanID: parent.span, TraceFlags: trace.FlagsSampled, Remote: true}))
	}
	ctx, s := t.tracer.Start(ctx, "chat", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
	var c carrier
	propagation.TraceContext{}.Inject(ctx, &c)
	if !s.IsRecording() {
		return nil, c.parent
	}
	return &Span{s}, c.parent
}

// carrier holds the traceparent the propagator writes.
type carrier struct{ parent string }

func (c *carrier) Get(key string) string {
	if key == "traceparent" {
		return c.parent
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	if key == "traceparent" {
		c.parent = value
	}
}

func (c *carrier) Keys() []string { return []string{"traceparent"} }

// Attr is one attribute of a span or event.
type Attr = attribute.KeyValue

// String, Int, Bool and Float make attributes.
func String(k, v string) Attr    { return attribute.String(k, v) }
func Int(k string, v int64) Attr { return attribute.Int64(k, v) }
func Bool(k string, v bool) Attr { return attribute.Bool(k, v) }

// Float makes a float attribute; NaN and the infinities become 0.
func Float(k string, v float64) Attr {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return attribute.Float64(k, v)
}

// Event is something that happened during a span.
type Event struct {
	Name  string
	Attrs []Attr
}

// Finish is what a span says once its request has ended.
type Finish struct {
	Name   string
	End    time.Time
	Attrs  []Attr
	Events []Event // at End
	// Error is the status message of a request that failed; "" when it
	// did not.
	Error string
}

// End finishes sp (nil: nothing) and hands it to the exporter's queue.
func (t *Tracer) End(sp *Span, f Finish) {
	if t == nil || sp == nil {
		return
	}
	s := sp.s
	s.SetName(f.Name)
	s.SetAttributes(f.Attrs...)
	for _, e := range f.Events {
		s.AddEvent(e.Name, trace.WithTimestamp(f.End), trace.WithAttributes(e.Attrs...))
	}
	if f.Error != "" {
		s.SetStatus(codes.Error, f.Error)
	}
	s.End(trace.WithTimestamp(f.End))
}

// Start begins exporting, from the goroutine of the SDK's batcher;
// spans ended before are not exported.
func (t *Tracer) Start() {
	if t != nil && t.started.CompareAndSwap(false, true) {
		t.tp.RegisterSpanProcessor(&gate{exporter: t.exporter, next: sdktrace.NewBatchSpanProcessor(t.exporter,
			sdktrace.WithMaxQueueSize(queueSize), sdktrace.WithMaxExportBatchSize(batchSize),
			sdktrace.WithBatchTimeout(batchEvery), sdktrace.WithExportTimeout(exportTimeout))})
	}
}

// Shutdown sends what is queued, within ctx and at most 5 s, and stops;
// spans ended later are not exported. A node shuts its tracer down after
// its last request. It may be called more than once.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	return t.tp.Shutdown(ctx)
}
