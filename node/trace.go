package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/node/config"
)

// W3C trace context: a request's traceparent names its trace and the span
// that sent it. A node passes it on to the provider it calls and to the
// node it forwards through, with its own span as the parent when it
// traces (tracing.otlp_endpoint), unchanged when it does not.

type traceID [16]byte
type spanID [8]byte

// traceParent is a parsed traceparent header.
type traceParent struct {
	trace   traceID
	span    spanID
	sampled bool
}

// parseTraceParent parses version 00 of the header (and, as the spec asks,
// the first four fields of a later version). It allocates nothing.
func parseTraceParent(s string) (traceParent, bool) {
	var tp traceParent
	if len(s) < 55 || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) || s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] == "ff" {
		return tp, false
	}
	var ver [1]byte
	if _, err := hex.Decode(ver[:], []byte(s[:2])); err != nil {
		return tp, false
	}
	var flags [1]byte
	if _, err := hex.Decode(tp.trace[:], []byte(s[3:35])); err != nil {
		return tp, false
	}
	if _, err := hex.Decode(tp.span[:], []byte(s[36:52])); err != nil {
		return tp, false
	}
	if _, err := hex.Decode(flags[:], []byte(s[53:55])); err != nil {
		return tp, false
	}
	if tp.trace == (traceID{}) || tp.span == (spanID{}) || !lowerHex(s[:55]) {
		return tp, false
	}
	tp.sampled = flags[0]&1 == 1
	return tp, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'F' {
			return false
		}
	}
	return true
}

func (tp traceParent) String() string {
	flags := "00"
	if tp.sampled {
		flags = "01"
	}
	return "00-" + hex.EncodeToString(tp.trace[:]) + "-" + hex.EncodeToString(tp.span[:]) + "-" + flags
}

// maxTraceState is the longest tracestate passed on (the spec's 32
// members fit in 512 bytes); a longer one is dropped.
const maxTraceState = 512

// traceState returns the tracestate to pass on with traceparent: the
// caller's, when there is a traceparent and it is of a sane size.
func traceState(traceparent, header string) string {
	if traceparent == "" || len(header) > maxTraceState || !asciiIn(header, ' ', '~') {
		return ""
	}
	return header
}

// span is one request's span on this node: the server side of a client's
// call, or of a peer's forward.
type span struct {
	ctx    traceParent // this span's ids
	parent spanID      // zero for a root span
	start  time.Time
}

// tracer exports spans to an OTLP/HTTP collector in batches, from a
// bounded queue: a request hands its span over without waiting, and when
// the collector is slow or gone, spans are dropped and counted, never
// queued without bound.
type tracer struct {
	cfg      *config.Tracing
	resource []otlpAttr
	queue    chan otlpSpan
	client   *http.Client
	log      *slog.Logger
	exported *prometheus.CounterVec // outcome: exported, dropped, failed
	stop     chan struct{}
	done     chan struct{} // closed when run returns
	started  atomic.Bool
	once     sync.Once
	failing  bool // the last export failed (run's goroutine only)
}

const (
	traceQueue = 4096
	traceBatch = 512
	traceEvery = time.Second
)

func newTracer(cfg *config.Tracing, node, region, version string, log *slog.Logger, reg prometheus.Registerer) *tracer {
	if cfg == nil {
		return nil
	}
	t := &tracer{
		cfg: cfg,
		resource: []otlpAttr{str("service.name", cfg.Service), str("service.instance.id", node),
			str("service.version", version), str("cloud.region", region)},
		queue:  make(chan otlpSpan, traceQueue),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second},
		log:    log,
		exported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_trace_spans_total",
			Help: "Request spans by what became of them: exported to the collector, dropped (queue full) or failed (the collector refused or could not be reached).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{"exported", "dropped", "failed"} {
		t.exported.WithLabelValues(o)
	}
	reg.MustRegister(t.exported)
	return t
}

// begin starts a request's span. header is the caller's traceparent, if
// any; out is what to send on to providers and peers. Without a tracer,
// a valid traceparent is passed on as it came and no span is made.
func (t *tracer) begin(header string, start time.Time) (sp *span, out string) {
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
	sp = &span{start: start}
	if ok {
		sp.ctx.trace, sp.parent, sp.ctx.sampled = parent.trace, parent.span, parent.sampled
	} else {
		_, _ = rand.Read(sp.ctx.trace[:])
		sp.ctx.sampled = t.cfg.Ratio >= 1 || (t.cfg.Ratio > 0 && mrand.Float64() < t.cfg.Ratio)
	}
	_, _ = rand.Read(sp.ctx.span[:])
	if !sp.ctx.sampled {
		// Not recorded here; the caller's decision travels on.
		return nil, sp.ctx.String()
	}
	return sp, sp.ctx.String()
}

// end finishes a request's span with what account knows of it.
func (t *tracer) end(sp *span, e *decision, via string) {
	if t == nil || sp == nil {
		return
	}
	end := sp.start.Add(e.took)
	o := otlpSpan{
		TraceID: hex.EncodeToString(sp.ctx.trace[:]), SpanID: hex.EncodeToString(sp.ctx.span[:]),
		Name: "chat " + e.model, Kind: 2, // SERVER
		Start: strconv.FormatInt(sp.start.UnixNano(), 10), End: strconv.FormatInt(end.UnixNano(), 10),
		Attributes: []otlpAttr{
			str("gen_ai.operation.name", "chat"), str("gen_ai.request.model", e.model),
			str("llmesh.request_id", e.id), str("llmesh.tenant", e.tenant), str("llmesh.outcome", outcome(e.status, e.res)),
			integer("http.response.status_code", int64(e.status)), boolean("llmesh.stream", e.stream),
		},
	}
	if sp.parent != (spanID{}) {
		o.ParentSpanID = hex.EncodeToString(sp.parent[:])
	}
	if e.origin != "" {
		o.Attributes = append(o.Attributes, str("llmesh.forwarded_by", e.origin))
	}
	if r := e.res; r != nil && r.Target != nil {
		o.Attributes = append(o.Attributes, str("llmesh.provider", e.provider), str("llmesh.via", via),
			integer("gen_ai.usage.input_tokens", int64(r.Usage.PromptTokens)),
			integer("gen_ai.usage.output_tokens", int64(r.Usage.CompletionTokens)),
			double("llmesh.cost_usd", r.Cost), integer("llmesh.attempts", int64(len(r.Attempts))))
		if r.Replica != "" {
			o.Attributes = append(o.Attributes, str("llmesh.replica", r.Replica))
		}
		for _, a := range r.Attempts {
			o.Events = append(o.Events, otlpEvent{
				Time: strconv.FormatInt(end.UnixNano(), 10), Name: "attempt",
				Attributes: []otlpAttr{str("llmesh.provider", a.Provider), str("llmesh.outcome", string(a.Outcome)),
					integer("http.response.status_code", int64(a.Status)), integer("llmesh.ms", a.Duration.Milliseconds())},
			})
		}
	}
	switch {
	case e.err != nil:
		_, ae := classify(e.err)
		o.Status = &otlpStatus{Code: 2, Message: ae.Code}
	case e.status >= 500 || (e.res != nil && e.res.Truncated):
		o.Status = &otlpStatus{Code: 2, Message: outcome(e.status, e.res)}
	}
	select {
	case t.queue <- o:
	default:
		t.exported.WithLabelValues("dropped").Inc()
	}
}

// start sends spans from a goroutine of its own until close.
func (t *tracer) start() {
	if t != nil && t.started.CompareAndSwap(false, true) {
		go t.run(t.stop)
	}
}

// close sends what is queued, within a bound, and stops. A node closes
// its tracer after its last request.
func (t *tracer) close() {
	if t == nil {
		return
	}
	t.once.Do(func() { close(t.stop) })
	if t.started.Load() {
		<-t.done
	}
}

// run sends batches until stop is closed, then what is queued, within a
// bound.
func (t *tracer) run(stop <-chan struct{}) {
	defer close(t.done)
	tick := time.NewTicker(traceEvery)
	defer tick.Stop()
	batch := make([]otlpSpan, 0, traceBatch)
	flush := func(ctx context.Context) {
		if len(batch) > 0 {
			t.send(ctx, batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case o := <-t.queue:
			if batch = append(batch, o); len(batch) == traceBatch {
				flush(context.Background())
			}
		case <-tick.C:
			flush(context.Background())
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				select {
				case o := <-t.queue:
					if batch = append(batch, o); len(batch) == traceBatch {
						flush(ctx)
					}
					continue
				default:
				}
				break
			}
			flush(ctx)
			return
		}
	}
}

func (t *tracer) send(ctx context.Context, spans []otlpSpan) {
	body, err := json.Marshal(otlpExport{ResourceSpans: []otlpResourceSpans{{
		Resource:   otlpResource{Attributes: t.resource},
		ScopeSpans: []otlpScopeSpans{{Scope: otlpScope{Name: "github.com/llmesh/llmesh/node"}, Spans: spans}},
	}}})
	if err == nil {
		err = t.post(ctx, body)
	}
	if err != nil {
		t.exported.WithLabelValues("failed").Add(float64(len(spans)))
		if !t.failing { // once per outage, not once a second
			t.log.Warn("could not export spans; they are dropped until the collector answers", "spans", len(spans), "endpoint", t.cfg.Endpoint, "err", err)
		}
		t.failing = true
		return
	}
	if t.failing {
		t.log.Info("exporting spans again", "endpoint", t.cfg.Endpoint)
	}
	t.failing = false
	t.exported.WithLabelValues("exported").Add(float64(len(spans)))
}

func (t *tracer) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.cfg.Endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	for k, v := range t.cfg.Headers {
		req.Header[k] = []string{v.Reveal()}
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("collector answered %s", resp.Status)
	}
	return nil
}

// OTLP/HTTP JSON (opentelemetry-proto's JSON mapping: ids in hex, 64-bit
// integers as strings).
type (
	otlpExport struct {
		ResourceSpans []otlpResourceSpans `json:"resourceSpans"`
	}
	otlpResourceSpans struct {
		Resource   otlpResource     `json:"resource"`
		ScopeSpans []otlpScopeSpans `json:"scopeSpans"`
	}
	otlpResource struct {
		Attributes []otlpAttr `json:"attributes"`
	}
	otlpScopeSpans struct {
		Scope otlpScope  `json:"scope"`
		Spans []otlpSpan `json:"spans"`
	}
	otlpScope struct {
		Name string `json:"name"`
	}
	otlpSpan struct {
		TraceID      string      `json:"traceId"`
		SpanID       string      `json:"spanId"`
		ParentSpanID string      `json:"parentSpanId,omitempty"`
		Name         string      `json:"name"`
		Kind         int         `json:"kind"`
		Start        string      `json:"startTimeUnixNano"`
		End          string      `json:"endTimeUnixNano"`
		Attributes   []otlpAttr  `json:"attributes"`
		Events       []otlpEvent `json:"events,omitempty"`
		Status       *otlpStatus `json:"status,omitempty"`
	}
	otlpEvent struct {
		Time       string     `json:"timeUnixNano"`
		Name       string     `json:"name"`
		Attributes []otlpAttr `json:"attributes"`
	}
	otlpStatus struct {
		Code    int    `json:"code"` // 1 ok, 2 error
		Message string `json:"message,omitempty"`
	}
	otlpAttr struct {
		Key   string    `json:"key"`
		Value otlpValue `json:"value"`
	}
	otlpValue struct {
		String *string  `json:"stringValue,omitempty"`
		Int    *string  `json:"intValue,omitempty"`
		Double *float64 `json:"doubleValue,omitempty"`
		Bool   *bool    `json:"boolValue,omitempty"`
	}
)

func str(k, v string) otlpAttr { return otlpAttr{Key: k, Value: otlpValue{String: &v}} }
func integer(k string, v int64) otlpAttr {
	s := strconv.FormatInt(v, 10)
	return otlpAttr{Key: k, Value: otlpValue{Int: &s}}
}
func boolean(k string, v bool) otlpAttr { return otlpAttr{Key: k, Value: otlpValue{Bool: &v}} }
func double(k string, v float64) otlpAttr {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return otlpAttr{Key: k, Value: otlpValue{Double: &v}}
}
