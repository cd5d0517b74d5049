package tracing

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func newTestTracer(t *testing.T, url string) (*Tracer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	tr, err := New(Config{Endpoint: url + "/v1/traces", Headers: map[string]string{"Authorization": "Bearer c"}, Ratio: 1,
		Service: "llmesh", Node: "n1", Region: "r1", Version: "v", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return tr, reg
}

func spans(reg *prometheus.Registry, outcome string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "llmesh_trace_spans_total" && m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// Shutdown sends the spans still queued, with the resource and the
// collector's headers, and counts them exported; a collector that
// refuses has them counted failed.
func TestShutdownFlushes(t *testing.T) {
	var got atomic.Int64
	var refuse atomic.Bool
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req coltracepb.ExportTraceServiceRequest
		b, _ := io.ReadAll(r.Body)
		if err := proto.Unmarshal(b, &req); err != nil || r.Header.Get("Authorization") != "Bearer c" {
			t.Errorf("%v %q", err, r.Header.Get("Authorization"))
		}
		if refuse.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		for _, rs := range req.ResourceSpans {
			attrs := map[string]string{}
			for _, a := range rs.GetResource().GetAttributes() {
				attrs[a.Key] = a.GetValue().GetStringValue()
			}
			if attrs["service.name"] != "llmesh" || attrs["service.instance.id"] != "n1" || attrs["cloud.region"] != "r1" {
				t.Errorf("resource %v", attrs)
			}
			for _, ss := range rs.ScopeSpans {
				got.Add(int64(len(ss.Spans)))
			}
		}
	}))
	defer col.Close()
	tr, reg := newTestTracer(t, col.URL)
	tr.Start()
	for range 3 {
		sp, _ := tr.Begin("", time.Now())
		tr.End(sp, Finish{Name: "chat m", End: time.Now(), Attrs: []Attr{String("k", "v"), Int("i", 1), Bool("b", true), Float("f", 0)}})
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 3 || spans(reg, "exported") != 3 {
		t.Fatalf("collector got %d, exported %v", got.Load(), spans(reg, "exported"))
	}
	_ = tr.Shutdown(context.Background()) // twice is fine

	refuse.Store(true)
	tr, reg = newTestTracer(t, col.URL)
	tr.Start()
	sp, _ := tr.Begin("", time.Now())
	tr.End(sp, Finish{Name: "chat m", End: time.Now(), Error: "upstream_error"})
	_ = tr.Shutdown(context.Background())
	if spans(reg, "failed") != 1 || spans(reg, "exported") != 0 {
		t.Fatalf("failed %v, exported %v", spans(reg, "failed"), spans(reg, "exported"))
	}
}

// Past the queue's length, spans are dropped and counted, never queued.
func TestGateDrops(t *testing.T) {
	tr, reg := newTestTracer(t, "http://127.0.0.1:1")
	tr.exporter.held.Store(queueSize)
	tr.Start()
	sp, _ := tr.Begin("", time.Now())
	tr.End(sp, Finish{Name: "chat m", End: time.Now()})
	if spans(reg, "dropped") != 1 || tr.exporter.held.Load() != queueSize {
		t.Fatalf("dropped %v, held %d", spans(reg, "dropped"), tr.exporter.held.Load())
	}
	_ = tr.Shutdown(context.Background())
}
