package node_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
)

// What the providers view reports once a provider answered: the latency
// of a whole answer, and the time to the first token of a stream.
func TestProviderViewShowsLatencyAndTTFT(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai", emu: emulator.Config{TTFT: 20 * time.Millisecond, Latency: 20 * time.Millisecond, TPS: 200}}}, nil)
	if v := providerView(t, f.url, "p"); v.TTFTMillis != 0 || v.LatencyMillis != 0 {
		t.Fatalf("before any answer: %+v, want nothing observed", v)
	}
	if resp := f.post(hello); resp.StatusCode != http.StatusOK {
		t.Fatalf("whole answer: %s", resp.Status)
	}
	resp := f.post(`{"model":"gpt-4o-mini","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", resp.Status)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if v := providerView(t, f.url, "p"); v.TTFTMillis <= 0 || v.LatencyMillis <= 0 {
		t.Fatalf("after a whole answer and a stream: %+v, want latency and TTFT", v)
	}
}

// A single voter with Raft's own timings: budgets, read through the
// leader, answer as soon as the node is ready, and a budget set at once
// is written, each waiting for the election rather than failing with 503.
func TestBudgetsRightAfterSingleVoterStarts(t *testing.T) {
	voter := func(c *node.Config) {
		c.Node.Voter, c.Node.BootstrapExpect = true, 1
		c.Node.Raft, c.Node.RPC = "127.0.0.1:0", "127.0.0.1:0"
		c.Node.DataDir = t.TempDir()
	}
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, voter)
	resp := mustGet(t, f.url+"/v1/mesh/budgets")
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("budgets right after start: %s %s", resp.Status, body)
	}
	g := startNode(t, []upstream{{name: "p", kind: "openai"}}, voter)
	req, _ := http.NewRequest(http.MethodPut, g.url+"/v1/mesh/budgets/t1", strings.NewReader(`{"usd": 5, "period": "day"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("setting a budget right after start: %s %s", resp.Status, body)
	}
}

// Headers over limits.max_header_bytes are refused with 431 in OpenAI's
// shape, naming the limit; a body over limits.max_body_bytes with 413
// naming its limit.
func TestHeaderAndBodyLimitErrorsInShape(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		c.Limits.MaxHeaderBytes = 4 << 10
		c.Limits.MaxBodyBytes = 2 << 10
	})
	for _, c := range []struct {
		name, body, hdr string
		status          int
		code, msg       string
	}{
		{"headers", hello, strings.Repeat("p", 8<<10), http.StatusRequestHeaderFieldsTooLarge, "headers_too_large", "at most 4096 (limits.max_header_bytes)"},
		{"body", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 4<<10) + `"}]}`, "", http.StatusRequestEntityTooLarge, "request_too_large", "at most 2048 bytes (limits.max_body_bytes)"},
	} {
		resp := f.post(c.body, "X-Padding", c.hdr)
		v := errorVerdict(t, resp.StatusCode, []byte(readAll(t, resp.Body)))
		if v.Status != c.status || v.Code != c.code || !strings.Contains(v.Message, c.msg) {
			t.Errorf("%s: %+v, want %d %s %q", c.name, v, c.status, c.code, c.msg)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
	}
	if resp := f.post(hello); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the refusals: %s", resp.Status)
	}
}
