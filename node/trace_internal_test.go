package node

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node/config"
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
	var off *tracer
	if sp, out := off.begin(in, time.Time{}); sp != nil || out != in {
		t.Fatalf("off: %v %q", sp, out)
	}
	if sp, out := off.begin("garbage", time.Time{}); sp != nil || out != "" {
		t.Fatalf("off, invalid: %v %q", sp, out)
	}
	on := &tracer{cfg: &config.Tracing{Ratio: 1}}
	sp, out := on.begin(in, time.Time{})
	got, _ := parseTraceParent(out)
	if sp == nil || got.trace != sp.ctx.trace || got.span != sp.ctx.span || !strings.HasPrefix(out, in[:36]) || strings.HasSuffix(out, in[36:]) {
		t.Fatalf("on: %+v %q", sp, out)
	}
	if sp.parent != [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7} {
		t.Fatalf("parent %x", sp.parent)
	}
	// The caller's decision not to sample is followed, and its
	// traceparent passed on as it came.
	if sp, out := on.begin(in[:53]+"00", time.Time{}); sp != nil || out != in[:53]+"00" {
		t.Fatalf("unsampled: %v %q", sp, out)
	}
	// A node that samples nothing starts no trace but says so downstream.
	none := &tracer{cfg: &config.Tracing{Ratio: 0}}
	if sp, out := none.begin("", time.Time{}); sp != nil || !strings.HasSuffix(out, "-00") {
		t.Fatalf("ratio 0: %v %q", sp, out)
	}
}
