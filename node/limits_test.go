package node_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// errorCode returns the OpenAI error code of an answer.
func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	var doc struct{ Error struct{ Code, Param string } }
	if err := json.Unmarshal([]byte(readAll(t, resp.Body)), &doc); err != nil {
		t.Fatalf("%s: not OpenAI's error shape: %v", resp.Status, err)
	}
	return doc.Error.Code
}

// Too many messages, or too large headers, are refused; the node goes on
// serving.
func TestMessageAndHeaderLimits(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		c.Limits.MaxMessages = 3
		c.Limits.MaxHeaderBytes = 4 << 10
	})
	msgs := strings.Repeat(`{"role":"user","content":"x"},`, 4)
	resp := f.post(`{"model":"gpt-4o-mini","messages":[` + strings.TrimSuffix(msgs, ",") + `]}`)
	if resp.StatusCode != 400 || errorCode(t, resp) != "invalid_request" {
		t.Fatalf("4 messages: %s", resp.Status)
	}
	// Beyond max_header_bytes: 431 in OpenAI's shape.
	if resp := f.post(hello, "X-Padding", strings.Repeat("p", 16<<10)); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || errorCode(t, resp) != "headers_too_large" {
		t.Fatalf("16 KiB of headers: %s", resp.Status)
	}
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatalf("after the refusals: %s", resp.Status)
	}
}

// One tenant's requests in flight on a node are bounded: past the bound
// it gets 429 rate_limited with Retry-After, while another tenant is
// served, and once its requests finish it is served again.
func TestConcurrentRequestsPerTenant(t *testing.T) {
	const other = "sk-test-other-tenant-0001"
	release := make(chan struct{})
	var held sync.WaitGroup
	// A provider that holds t1's requests until the test lets them go,
	// so that the bound is reached without depending on timing.
	holding := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		held.Done()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"slow-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		c.Limits.MaxConcurrentPerTenant = 2
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "t2", KeySHA256: []string{sha(other)}})
		c.Providers = append(c.Providers, node.ProviderSection{Name: "holding", Kind: "openai", Region: "eu-west", BaseURL: holding,
			Models: []node.ModelSection{{Name: "slow-model", InputUSDPerMTok: 1, OutputUSDPerMTok: 1}}})
	})
	slow := `{"model":"slow-model","messages":[{"role":"user","content":"wait"}]}`
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	held.Add(2)
	for range 2 {
		wg.Go(func() { codes <- f.post(slow).StatusCode })
	}
	held.Wait() // both are at the provider
	resp := f.post(hello)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || errorCode(t, resp) != "rate_limited" {
		t.Fatalf("t1's third request: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp := postAs(t, f.url, other, hello); resp.StatusCode != 200 {
		t.Fatalf("t2 while t1 is at its bound: %s", resp.Status)
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a request within the bound: %d", c)
		}
	}
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatalf("t1 once its requests finished: %s", resp.Status)
	}
}

// A provider that streams without end is cut at max_stream_duration with
// an error event, and the node goes on serving. (Streams within the bound
// run through every other stream test under the default hour.)
func TestEndlessStreamIsCut(t *testing.T) {
	endless := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x%d \"}}]}\n\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	f := startNode(t, []upstream{{name: "healthy", kind: "openai", in: 1, out: 1}}, func(c *node.Config) {
		withBroken(endless)(c)
		c.Limits.MaxStreamDuration = node.Duration(500 * time.Millisecond)
	})
	stream := strings.Replace(hello, `"messages"`, `"stream":true,"messages"`, 1)
	start := time.Now()
	resp := f.post(stream)
	out := readAll(t, resp.Body)
	took := time.Since(start)
	if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Provider") != "broken" || !strings.Contains(out, "limits.max_stream_duration") ||
		strings.Contains(out, "[DONE]") || took > 5*time.Second {
		t.Fatalf("%s after %v from %q: ...%s", resp.Status, took, resp.Header.Get("X-LLMesh-Provider"), out[max(0, len(out)-300):])
	}
	t.Logf("the endless stream was cut after %v", took.Round(time.Millisecond))
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatalf("after the cut: %s", resp.Status)
	}
}

// A client that stops reading a stream is let go after client_write,
// however fast the provider writes; a client that reads a stream lasting
// several times client_write gets all of it.
func TestSlowReaderCutLongStreamKept(t *testing.T) {
	chunk := `{"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 32<<10) + `"}}]}`
	flood := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	f := startNode(t, []upstream{{name: "slow", kind: "openai", in: 1, out: 1, emu: emulator.Config{TPS: 20}}}, func(c *node.Config) {
		c.Timeouts.ClientWrite = node.Duration(300 * time.Millisecond)
		c.Providers = append(c.Providers, node.ProviderSection{
			Name: "flood", Kind: "openai", Region: "eu-west", BaseURL: flood,
			Models: []node.ModelSection{{Name: "flood-model", InputUSDPerMTok: 1, OutputUSDPerMTok: 1}},
		})
	})
	// The reader: 30 tokens at 20 a second, well past client_write.
	start := time.Now()
	resp := f.post(`{"model":"gpt-4o-mini","stream":true,"max_tokens":30,"messages":[{"role":"user","content":"go"}]}`)
	out := readAll(t, resp.Body)
	if took := time.Since(start); resp.StatusCode != 200 || !strings.HasSuffix(out, "data: [DONE]\n\n") || took < time.Second {
		t.Fatalf("a reading client's %v stream: %s ...%s", took, resp.Status, out[max(0, len(out)-200):])
	}
	// The client that never reads.
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"flood-model","stream":true,"messages":[{"role":"user","content":"go"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", testKey, len(body), body)
	wait.For(t, 10*time.Second, "the stream to the client that does not read to begin", func() bool { return f.node.Status(t.Context()).InFlight == 1 })
	// Its stream is cut once a write has waited client_write, and no write
	// waits before the kernel's socket buffers on both ends are full:
	// megabytes of the flood, which take the node most of 10 s to relay
	// under -race on a loaded 2-core machine (CI saw 15 s run out).
	took := wait.For(t, 60*time.Second, "the node to let the client that does not read go", func() bool { return f.node.Status(t.Context()).InFlight == 0 })
	t.Logf("a client that stopped reading was let go %v after its stream began", took.Round(10*time.Millisecond))
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatalf("after: %s", resp.Status)
	}
}
