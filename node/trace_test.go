package node_test

import (
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// collector is an OTLP/HTTP (protobuf) trace receiver on loopback.
type collector struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []collectedSpan
	auth  []string
}

type collectedSpan struct {
	TraceID, SpanID, ParentSpanID, Name string
	Attrs                               map[string]any
	Status                              struct{ Code int }
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var doc coltracepb.ExportTraceServiceRequest
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, &doc) != nil {
			t.Errorf("collector got %s %s %q: %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"), b)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.auth = append(c.auth, r.Header.Get("Authorization"))
		for _, rs := range doc.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					cs := collectedSpan{TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
						ParentSpanID: hex.EncodeToString(s.ParentSpanId), Name: s.Name, Attrs: map[string]any{}}
					cs.Status.Code = int(s.GetStatus().GetCode())
					for _, a := range s.Attributes {
						cs.Attrs[a.Key] = anyValue(a.Value)
					}
					c.spans = append(c.spans, cs)
				}
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// anyValue is an attribute's value as JSON would have decoded it.
func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10) // OTLP/JSON's form of a 64-bit integer
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	}
	return nil
}

// byRequest returns the spans of one request id.
func (c *collector) byRequest(id string) []collectedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []collectedSpan
	for _, s := range c.spans {
		if s.Attrs["llmesh.request_id"] == id {
			out = append(out, s)
		}
	}
	return out
}

func init() { testEnvKeys["LLMESH_TEST_OTLP_HEADERS"] = "Authorization=Bearer collector-secret" }

// A forwarded request is one trace: the client's traceparent names it,
// the node the client called records a span under the client's, the node
// that called the provider one under that, and the provider is sent a
// traceparent whose parent is the last span. Both spans reach an OTLP
// collector with the request id, tenant, provider and outcome.
func TestTracingAcrossAForward(t *testing.T) {
	col := newCollector(t)
	f := startRegions(t, regionsUpstreams(emulator.Config{}), func(region string, c *node.Config) {
		c.Tracing = node.TracingSection{OTLPEndpoint: col.srv.URL, HeadersEnv: "LLMESH_TEST_OTLP_HEADERS"}
	})
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		client  = "00f067aa0ba902b7"
	)
	resp := postAs(t, f.urls["us"], euKey, hello, "Traceparent", "00-"+traceID+"-"+client+"-01", "Tracestate", "vendor=opaque-1", "X-Request-Id", "traced-1")
	if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Via") != "eu-1" {
		t.Fatalf("%s via %q", resp.Status, resp.Header.Get("X-LLMesh-Via"))
	}
	var spans []collectedSpan
	wait.For(t, 10*time.Second, "both nodes' spans at the collector", func() bool {
		spans = col.byRequest("traced-1")
		return len(spans) == 2
	})
	near, far := spans[0], spans[1]
	if near.Attrs["llmesh.forwarded_by"] != nil {
		near, far = far, near
	}
	for _, s := range spans {
		if s.TraceID != traceID || s.Name != "chat gpt-4o-mini" || s.Attrs["llmesh.tenant"] != "acme-eu" ||
			s.Attrs["llmesh.provider"] != "gpu-eu" || s.Attrs["llmesh.outcome"] != "ok" || s.Status.Code == 2 {
			t.Errorf("span %+v", s)
		}
	}
	if near.ParentSpanID != client || far.ParentSpanID != near.SpanID || far.Attrs["llmesh.forwarded_by"] != "us-1" ||
		near.Attrs["llmesh.via"] != "eu-1" {
		t.Fatalf("near %+v\nfar %+v", near, far)
	}
	var sent, state string
	for _, r := range f.emus["gpu-eu"].Received() {
		if r.Path == "/v1/chat/completions" {
			sent, state = r.Header.Get("Traceparent"), r.Header.Get("Tracestate")
		}
	}
	if sent != "00-"+traceID+"-"+far.SpanID+"-01" || state != "vendor=opaque-1" {
		t.Fatalf("the provider was sent traceparent %q, tracestate %q; the far span is %s", sent, state, far.SpanID)
	}
	col.mu.Lock()
	if len(col.auth) == 0 || col.auth[0] != "Bearer collector-secret" {
		t.Errorf("the collector's headers: %q", col.auth)
	}
	col.mu.Unlock()

	// Without a traceparent the node starts the trace; a refusal is a span too.
	postAs(t, f.urls["eu"], euKey, hello, "X-Request-Id", "traced-2")
	postAs(t, f.urls["eu"], "sk-wrong", hello, "X-Request-Id", "traced-3")
	wait.For(t, 10*time.Second, "the new trace's and the refusal's spans", func() bool {
		return len(col.byRequest("traced-2")) == 1 && len(col.byRequest("traced-3")) == 1
	})
	if s := col.byRequest("traced-2")[0]; s.ParentSpanID != "" || len(s.TraceID) != 32 || s.TraceID == traceID {
		t.Fatalf("root span %+v", s)
	}
	if s := col.byRequest("traced-3")[0]; s.Status.Code != 2 || s.Attrs["llmesh.outcome"] != "refused" {
		t.Fatalf("refusal span %+v", s)
	}
}

// A node that does not trace passes the caller's traceparent to the
// provider as it came.
func TestTraceParentPassedOnWithoutTracing(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if resp := f.post(hello, "Traceparent", tp); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	got := f.emus["p"].Received()
	if len(got) == 0 || got[len(got)-1].Header.Get("Traceparent") != tp {
		t.Fatalf("the provider got %v", got)
	}
	if resp := f.post(hello, "Traceparent", strings.ToUpper(tp)); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	got = f.emus["p"].Received()
	if h := got[len(got)-1].Header.Get("Traceparent"); h != "" {
		t.Fatalf("an invalid traceparent was passed on: %q", h)
	}
}

// Prompts are logged only when the node was started with -log-prompts
// (Options.LogPrompts), and then with the request id.
func TestLogPrompts(t *testing.T) {
	const prompt = "the quarterly numbers are 4711"
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + prompt + `"}]}`
	for _, on := range []bool{false, true} {
		logs := &syncBuffer{}
		m := startMeshWith(t, 1, []upstream{{name: "p", kind: "openai"}}, nil, func(i int, o *node.Options) {
			o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
			o.LogPrompts = on
		})
		if resp := postTo(t, m.urls[0], body, "X-Request-Id", "logged-1"); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		wait.For(t, 5*time.Second, "the request's log line", func() bool { return strings.Contains(logs.String(), `"msg":"request"`) })
		logged := strings.Contains(logs.String(), prompt)
		if logged != on {
			t.Fatalf("LogPrompts %v: prompt logged %v:\n%s", on, logged, logs)
		}
		if on && !strings.Contains(logs.String(), `"msg":"prompt","node":"node-0","request_id":"logged-1"`) {
			t.Fatalf("the prompt's line has no request id:\n%s", logs)
		}
	}
}
