package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A client that leaves mid-stream is still charged for what it got.
func TestAbandonedStreamIsAccounted(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai", in: 1, out: 100, emu: emulator.Config{TPS: 50}}}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for events := 0; events < 5; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	cancel()
	resp.Body.Close()
	wait.For(t, 5*time.Second, "the abandoned stream to be accounted", func() bool {
		m := readAll(t, mustGet(t, f.url+"/metrics").Body)
		return strings.Contains(m, `llmesh_requests_total{code="499",endpoint="chat",model="gpt-4o-mini",provider="p"} 1`) &&
			strings.Contains(m, `llmesh_cost_usd_total{model="gpt-4o-mini",provider="p",tenant="t1"}`) &&
			!strings.Contains(m, `llmesh_tokens_total{direction="completion",model="gpt-4o-mini",provider="p"} 0`)
	})
}

// Redirects are not followed (they would carry an Azure api-key to another
// host), and what a provider says in an error body stays in the node.
func TestProviderRedirectsAndErrorBodies(t *testing.T) {
	stolen := make(chan string, 1)
	thief := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		stolen <- r.Header.Get("Api-Key") + r.Header.Get("Authorization")
	})
	redirector := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, thief+r.URL.Path, http.StatusTemporaryRedirect)
	})
	leaky := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"Incorrect API key sk-SECRET-1234 for deployment on gpu-7.corp"}}`, http.StatusUnauthorized)
	})
	f := startNode(t, nil, func(c *node.Config) {
		for _, p := range []struct{ name, url string }{{"redirector", redirector}, {"leaky", leaky}} {
			c.Providers = append(c.Providers, node.ProviderSection{
				Name: p.name, Kind: "azure", Region: "eu-west", BaseURL: p.url, APIVersion: "2024-10-21", APIKeyEnv: "AZ_KEY",
				Models: []node.ModelSection{{Name: "gpt-4o-mini", Deployment: "d"}},
			})
		}
	})
	resp := f.post(hello)
	body := readAll(t, resp.Body)
	if resp.StatusCode != 502 || !strings.Contains(body, "upstream_error") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if strings.Contains(body, "SECRET") || strings.Contains(body, "corp") {
		t.Fatalf("a provider's error body reached the client: %s", body)
	}
	select {
	case got := <-stolen:
		t.Fatalf("the redirect was followed; the other host got %q", got)
	default:
	}
}

func init() { testEnvKeys["AZ_KEY"] = "az-provider-key" }

// X-LLMesh-Residency narrows where a request may go, and may not widen it.
func TestResidencyHeader(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "us-cheap", kind: "openai", in: 0.1, juris: []string{"us"}},
		{name: "eu-dear", kind: "openai", in: 1, juris: []string{"eu"}},
	}, func(c *node.Config) {
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "eu-only", KeySHA256: []string{sha("sk-eu-tenant")}, Residency: "eu"})
	})
	if p := f.post(hello).Header.Get("X-LLMesh-Provider"); p != "us-cheap" {
		t.Fatalf("unrestricted: %s", p)
	}
	if p := f.post(hello, "X-LLMesh-Residency", "eu").Header.Get("X-LLMesh-Provider"); p != "eu-dear" {
		t.Fatalf("narrowed to eu: %s", p)
	}
	resp := f.post(hello, "X-LLMesh-Residency", "jp")
	if body := readAll(t, resp.Body); resp.StatusCode != 400 || !strings.Contains(body, "X-LLMesh-Residency") {
		t.Fatalf("unknown jurisdiction: %d %s", resp.StatusCode, body)
	}
	resp = f.post(hello, "Authorization", "Bearer sk-eu-tenant", "X-LLMesh-Residency", "us")
	if body := readAll(t, resp.Body); resp.StatusCode != 400 || !strings.Contains(body, "widen") {
		t.Fatalf("widening: %d %s", resp.StatusCode, body)
	}
	resp = f.post(hello, "Authorization", "Bearer sk-eu-tenant")
	if p := resp.Header.Get("X-LLMesh-Provider"); resp.StatusCode != 200 || p != "eu-dear" {
		t.Fatalf("eu tenant: %d %s", resp.StatusCode, p)
	}
}

// Streams are relayed event by event even when an event arrives together
// with part of the next one, multi-line events keep their framing, and an
// upstream that keeps its body open after [DONE] does not hold the client.
func TestRelayFraming(t *testing.T) {
	readFirst := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"one"},"finish_reason":null}]}`+"\n\n"+`data: {"choices":[{"index":0,`)
		w.(http.Flusher).Flush()
		select { // the rest of event two only once the client holds event one
		case <-readFirst:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `"delta":{"content":"two"},"finish_reason":null}]}`+"\n\n")
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\n")
		io.WriteString(w, "data: \"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		select { // keep the body open after [DONE]
		case <-release:
		case <-r.Context().Done():
		}
	})
	f := startNode(t, nil, withBroken(u))
	resp := f.post(strings.Replace(hello, `"messages"`, `"stream":true,"messages"`, 1))
	rd := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := rd.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if !strings.Contains(line, `"one"`) {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event was held back while the next one was arriving")
	}
	close(readFirst)
	done := make(chan string, 1)
	go func() {
		rest, _ := io.ReadAll(rd)
		done <- string(rest)
	}()
	select {
	case rest := <-done:
		var events []string
		for _, ev := range strings.Split(strings.TrimSuffix(rest, "\n\n"), "\n\n") {
			events = append(events, strings.TrimSpace(ev))
		}
		if len(events) < 3 {
			t.Fatalf("events %q", events)
		}
		last := events[len(events)-3] // then the cost comment and [DONE]
		if events[len(events)-1] != "data: [DONE]" || !strings.HasPrefix(events[len(events)-2], ": X-LLMesh-Cost: ") ||
			last != "data: {\"choices\":[{\"index\":0,\ndata: \"delta\":{},\"finish_reason\":\"stop\"}]}" {
			t.Fatalf("events %q", events)
		}
		var doc map[string]any
		joined := strings.ReplaceAll(strings.TrimPrefix(last, "data: "), "\ndata: ", "\n")
		if err := json.Unmarshal([]byte(joined), &doc); err != nil {
			t.Fatalf("multi-line event does not reassemble: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client's response did not end while the provider kept its body open after [DONE]")
	}
}

// Keep-alive comments before the first event do not stop the first-byte
// timeout from moving on to another provider.
func TestCommentsAreNotAFirstByte(t *testing.T) {
	u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			fmt.Fprint(w, ": keep-alive\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	f := startNode(t, []upstream{{name: "healthy", kind: "openai", in: 1, out: 1}}, withBroken(u))
	resp := f.post(strings.Replace(hello, `"messages"`, `"stream":true,"messages"`, 1))
	if out := readAll(t, resp.Body); resp.Header.Get("X-LLMesh-Provider") != "healthy" || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Fatalf("%d from %q", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"))
	}
}

// An answer larger than the node relays is refused once, not retried on
// every provider, and does not count against the provider's health.
func TestOversizeAnswerIsNotRetried(t *testing.T) {
	f := startNode(t, []upstream{{name: "a", kind: "openai", in: 0.1}, {name: "b", kind: "openai", in: 1}}, func(c *node.Config) {
		c.Limits.MaxResponseBytes = 2000
		c.Outlier.ConsecutiveFailures = 1
	})
	resp := f.post(`{"model":"gpt-4o-mini","n":8,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	if body := readAll(t, resp.Body); resp.StatusCode != 502 || !strings.Contains(body, "limit of 2000 bytes") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := f.emus["b"].Stats().Requests; n != 0 {
		t.Fatalf("retried on b (%d requests)", n)
	}
	if resp := f.post(hello); resp.Header.Get("X-LLMesh-Provider") != "a" {
		t.Fatal("a was ejected for an answer the request asked for")
	}
}
