package tracing

import (
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestParseTraceParent(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp, valid := parseTraceParent(ok)
	if !valid || !tp.sampled || tp.String() != ok {
		t.Fatalf("%q: %+v %v", ok, tp, valid)
	}
	if tp, valid := parseTraceParent(strings.TrimSuffix(ok, "01") + "00"); !valid || tp.sampled {
		t.Fatalf("not sampled: %+v %v", tp, valid)
	}
	// A later version may add fields after a dash; its first four hold.
	if _, valid := parseTraceParent("01" + ok[2:] + "-extra"); !valid {
		t.Fatal("a later version with more fields is refused")
	}
	for _, bad := range []string{
		"", ok[:54], ok + "-extra", // version 00 is exactly 55 characters
		"ff" + ok[2:], // version ff is invalid
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		strings.ToUpper(ok), // hex is lower case
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	} {
		if _, valid := parseTraceParent(bad); valid {
			t.Errorf("%q parsed", bad)
		}
	}
	if a := testing.AllocsPerRun(100, func() { parseTraceParent(ok) }); a != 0 {
		t.Fatalf("parseTraceParent allocates %v times", a)
	}
}

// A node that does not trace passes a caller's valid traceparent on as it
// came, and makes none up; one that traces starts a span under it.
func TestTracerBegin(t *testing.T) {
	const in = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var off *Tracer
	if sp, out := off.Begin(in, time.Time{}); sp != nil || out != in {
		t.Fatalf("off: %v %q", sp, out)
	}
	if sp, out := off.Begin("garbage", time.Time{}); sp != nil || out != "" {
		t.Fatalf("off, invalid: %v %q", sp, out)
	}
	if a := testing.AllocsPerRun(100, func() { off.Begin(in, time.Time{}) }); a != 0 {
		t.Fatalf("Begin without a tracer allocates %v times", a)
	}
	on := unexported(1)
	sp, out := on.Begin(in, time.Time{})
	got, _ := parseTraceParent(out)
	if sp == nil || got.trace != sp.s.SpanContext().TraceID() || got.span != sp.s.SpanContext().SpanID() ||
		!strings.HasPrefix(out, in[:36]) || strings.HasSuffix(out, in[36:]) {
		t.Fatalf("on: %+v %q", sp, out)
	}
	if p := sp.s.(sdktrace.ReadOnlySpan).Parent().SpanID(); p != [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7} {
		t.Fatalf("parent %x", p)
	}
	// The caller's decision not to sample is followed, and its
	// traceparent passed on as it came.
	if sp, out := on.Begin(in[:53]+"00", time.Time{}); sp != nil || out != in[:53]+"00" {
		t.Fatalf("unsampled: %v %q", sp, out)
	}
	// A node that samples nothing starts no trace but says so downstream.
	none := unexported(0)
	if sp, out := none.Begin("", time.Time{}); sp != nil || !strings.HasSuffix(out, "-00") || len(out) != 55 {
		t.Fatalf("ratio 0: %v %q", sp, out)
	}
}

// unexported is a tracer that samples ratio of the traces it starts and
// exports nothing.
func unexported(ratio float64) *Tracer {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	return &Tracer{tp: tp, tracer: tp.Tracer(scope)}
}

func TestState(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct{ parent, header, want string }{
		{tp, "vendor=opaque-1", "vendor=opaque-1"},
		{"", "vendor=opaque-1", ""},
		{tp, strings.Repeat("a", 513), ""},
		{tp, "vendor=a, other=b~", "vendor=a, other=b~"},
		{tp, "vendor=\x01", ""},
	} {
		if got := State(c.parent, c.header); got != c.want {
			t.Errorf("State(%q, %q) = %q, want %q", c.parent, c.header, got, c.want)
		}
	}
}
