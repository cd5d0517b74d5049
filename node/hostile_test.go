package node_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// hostile starts a provider that answers every chat completion with h.
// It reads the request first, as a real server does (net/http notices a
// client gone only once the body is read).
func hostile(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// withBroken puts a provider at url in front of the healthy emulator: it
// is cheaper, so it is always tried first.
func withBroken(url string) func(*node.Config) {
	return func(c *node.Config) {
		c.Providers = append(c.Providers, node.ProviderSection{
			Name: "broken", Kind: "openai", Region: "eu-west", BaseURL: url,
			Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.01, OutputUSDPerMTok: 0.01}},
		})
		c.Timeouts.FirstByte = node.Duration(300 * time.Millisecond)
		c.Timeouts.Response = node.Duration(300 * time.Millisecond)
		c.Timeouts.StreamIdle = node.Duration(300 * time.Millisecond)
	}
}

// Before the first byte, every kind of misbehaviour moves the request on
// to a healthy provider.
func TestMisbehavingUpstreamFailsOver(t *testing.T) {
	stream := strings.Replace(hello, `"messages"`, `"stream":true,"messages"`, 1)
	for _, tc := range []struct {
		name string
		body string
		h    http.HandlerFunc
	}{
		{"invalid JSON", hello, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"message":`)
		}},
		{"not a completion", hello, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"hello":"world"}`) }},
		{"hangs", hello, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"stream hangs before first event", stream, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
		{"stream answered with JSON", stream, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[]}`)
		}},
		{"stream error event first", stream, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"error\":{\"message\":\"overloaded\"}}\n\n")
		}},
		{"empty stream", stream, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
		}},
		{"huge first event", stream, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: "+strings.Repeat("x", 2<<20)+"\n\n")
		}},
		{"401 from provider", hello, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startNode(t, []upstream{{name: "healthy", kind: "openai", in: 1, out: 1}}, withBroken(hostile(t, tc.h)))
			resp := f.post(tc.body)
			out := readAll(t, resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Provider") != "healthy" {
				t.Fatalf("%d from %q: %s", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"), out)
			}
			if !strings.Contains(resp.Header.Get("X-LLMesh-Route"), "failed over from broken") {
				t.Fatalf("route %q", resp.Header.Get("X-LLMesh-Route"))
			}
			if strings.Contains(tc.body, "stream") && !strings.HasSuffix(out, "data: [DONE]\n\n") {
				t.Fatalf("stream incomplete: %q", out)
			}
		})
	}
}

// After the first byte a stream is never re-sent: a break ends it with an
// error event in OpenAI's shape, and the node keeps serving.
func TestBrokenStreamEndsWithErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"connection cut", nil, "stream broke off"},
		{"stalls mid-stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`+"\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, "timed out"},
		{"ends without finishing", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`+"\n\n")
		}, "ended without finishing"},
		{"huge event mid-stream", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`+"\n\n")
			io.WriteString(w, "data: "+strings.Repeat("x", 2<<20)+"\n\n")
		}, "size limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *fixture
			if tc.h == nil {
				f = startNode(t, []upstream{{name: "p", kind: "openai"}}, nil)
				f.emus["p"].SetMode(emulator.ModeCut)
			} else {
				f = startNode(t, []upstream{{name: "healthy", kind: "openai", in: 1, out: 1}}, func(c *node.Config) {
					withBroken(hostile(t, tc.h))(c)
					// The first event comes at once; on a loaded machine it
					// may still take longer than the 300 ms the stalls need.
					c.Timeouts.FirstByte = node.Duration(5 * time.Second)
				})
			}
			resp := f.post(`{"model":"gpt-4o-mini","stream":true,"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
			out := readAll(t, resp.Body)
			if resp.StatusCode != 200 || strings.Contains(out, "[DONE]") {
				t.Fatalf("%d: %q", resp.StatusCode, out)
			}
			last := out[strings.LastIndex(strings.TrimSuffix(out, "\n\n"), "data: "):]
			if !strings.HasPrefix(last, `data: {"error":{"message":`) || !strings.Contains(last, tc.want) || !strings.Contains(last, `"code":"upstream_error"`) {
				t.Fatalf("last event %q", last)
			}
			if tc.h != nil && f.emus["healthy"].Stats().Requests != 0 {
				t.Fatal("a stream was re-sent after its first byte")
			}
			metrics := readAll(t, mustGet(t, f.url+"/metrics").Body)
			if !strings.Contains(metrics, "llmesh_streams_truncated_total") {
				t.Fatal("truncation not counted")
			}
			if tc.h == nil {
				f.emus["p"].SetMode(emulator.ModeUp)
			}
			wait.For(t, 10*time.Second, "the node to serve again", func() bool { return f.post(hello).StatusCode == 200 })
		})
	}
}

// An upstream stream that reports its finish but no [DONE] is complete:
// the client gets [DONE]. One without usage is counted by the node.
func TestStreamWithoutDoneOrUsage(t *testing.T) {
	u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{"Hello", " there", ""} {
			fin := "null"
			if c == "" {
				fin = `"stop"`
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":%s}]}\n\n", c, fin)
		}
	})
	f := startNode(t, nil, withBroken(u))
	resp := f.post(`{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	out := readAll(t, resp.Body)
	// [DONE] follows the stream's cost.
	if resp.StatusCode != 200 || !regexp.MustCompile(`"finish_reason":"stop"}]}\n\n: X-LLMesh-Cost: [0-9.]+\n\ndata: \[DONE\]\n\n$`).MatchString(out) {
		t.Fatalf("%d %q", resp.StatusCode, out)
	}
	metrics := readAll(t, mustGet(t, f.url+"/metrics").Body)
	for _, want := range []string{
		`llmesh_usage_counted_total{provider="broken"} 1`,
		`llmesh_tokens_total{direction="completion",model="gpt-4o-mini",provider="broken"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A long stream without usage is counted from what the node keeps of it
// (a bounded part) and the rate of the rest; an event of several data
// lines counts as one.
func TestLongStreamWithoutUsageIsCounted(t *testing.T) {
	pad := strings.Repeat("x", 150)
	u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 300 {
			if i == 1 {
				fmt.Fprintf(w, "data: {\"system_fingerprint\":%q,\n", pad)
				fmt.Fprint(w, "data: \"choices\":[{\"index\":0,\"delta\":{\"content\":\" hello\"},\"finish_reason\":null}]}\n\n")
				continue
			}
			fmt.Fprintf(w, "data: {\"system_fingerprint\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\" hello\"},\"finish_reason\":null}]}\n\n", pad)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	f := startNode(t, nil, withBroken(u))
	resp := f.post(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	out := readAll(t, resp.Body)
	if resp.StatusCode != 200 || strings.Count(out, `" hello"`) != 300 || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Fatalf("%d, %d events relayed", resp.StatusCode, strings.Count(out, `" hello"`))
	}
	// 300 tokens; the estimate of the part not kept may be off by the
	// tokens of about one event.
	if got := brokenCompletionTokens(t, f); got < 299 || got > 302 {
		t.Fatalf("counted %d completion tokens, want 300 (±2)", got)
	}
}

// A stream whose first event is larger than what is kept for counting is
// still counted (the first event is always kept).
func TestLargeFirstEventWithoutUsageIsCounted(t *testing.T) {
	u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", strings.Repeat(" hello", 4000))
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	f := startNode(t, nil, withBroken(u))
	resp := f.post(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if out := readAll(t, resp.Body); resp.StatusCode != 200 || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Fatalf("%d %.200q", resp.StatusCode, out)
	}
	if got := brokenCompletionTokens(t, f); got < 3990 || got > 4010 {
		t.Fatalf("counted %d completion tokens, want 4,000", got)
	}
}

// brokenCompletionTokens is what the node counted of the broken
// provider's completions.
func brokenCompletionTokens(t *testing.T, f *fixture) int {
	t.Helper()
	metrics := readAll(t, mustGet(t, f.url+"/metrics").Body)
	key := `llmesh_tokens_total{direction="completion",model="gpt-4o-mini",provider="broken"} `
	i := strings.Index(metrics, key)
	if i < 0 {
		t.Fatal("no completion tokens in the metrics")
	}
	var got int
	fmt.Sscan(metrics[i+len(key):], &got)
	return got
}

// An error answered after a wait longer than client_write still reaches
// the client: every answer is written under a fresh deadline.
func TestErrorAfterALongWaitIsDelivered(t *testing.T) {
	u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond) // the provider answers late: that wait is what is tested
		http.Error(w, `{"error":{"message":"bad","type":"invalid_request_error"}}`, http.StatusBadRequest)
	})
	f := startNode(t, nil, func(c *node.Config) {
		withBroken(u)(c)
		c.Providers = c.Providers[len(c.Providers)-1:] // the slow one alone
		c.Timeouts.FirstByte = node.Duration(2 * time.Second)
		c.Timeouts.Response = node.Duration(2 * time.Second)
		c.Timeouts.ClientWrite = node.Duration(100 * time.Millisecond)
	})
	resp := f.post(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	body := readAll(t, resp.Body)
	if resp.StatusCode/100 != 4 && resp.StatusCode/100 != 5 || !strings.Contains(body, `"error"`) {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// Slow clients cannot hold the node: headers and bodies have deadlines.
func TestSlowClientsAreCutOff(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		c.Timeouts.ReadHeader = node.Duration(200 * time.Millisecond)
		c.Timeouts.ReadBody = node.Duration(200 * time.Millisecond)
	})
	addr := strings.TrimPrefix(f.url, "http://")

	// Headers that never end: the connection is closed.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("headers: connection not closed by the node: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("slow headers held the connection %v", time.Since(start))
	}

	// A body that trickles: the request is refused.
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	fmt.Fprintf(conn2, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 200\r\n\r\n{\"model\":", testKey)
	conn2.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn2), nil)
	if err != nil {
		t.Fatalf("body: %v", err)
	}
	if body := readAll(t, resp.Body); resp.StatusCode != 400 || !strings.Contains(body, "could not read the request body") {
		t.Fatalf("trickling body: %d %s", resp.StatusCode, body)
	}
	if f.post(hello).StatusCode != 200 {
		t.Fatal("node not serving")
	}
}
