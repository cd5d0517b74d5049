package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// Streaming is incremental: the client holds the first chunk about when
// the provider produced it, long before the stream ends.
func TestStreamIsRelayedIncrementally(t *testing.T) {
	const ttft = 300 * time.Millisecond
	f := startNode(t, []upstream{{name: "slow", kind: "openai", emu: emulator.Config{TTFT: ttft, TPS: 20}}}, nil)
	start := time.Now()
	// 41 tokens: the first at TTFT, 40 more at 20 a second, 2s in all.
	resp := f.post(`{"model":"gpt-4o-mini","stream":true,"max_tokens":41,"messages":[{"role":"user","content":"go"}]}`)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	first := time.Since(start)
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q: %v", line, err)
	}
	rest, err := io.ReadAll(rd)
	total := time.Since(start)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream did not complete: %v", err)
	}
	t.Logf("first chunk after %v, stream done after %v", first, total)
	if first < ttft || first > ttft+300*time.Millisecond {
		t.Fatalf("first chunk after %v, want within 300ms of the provider's TTFT %v", first, ttft)
	}
	if total < 2*time.Second || total-first < 1500*time.Millisecond {
		t.Fatalf("stream took %v with the first chunk at %v: it was buffered", total, first)
	}
}

// Azure's first chunk, its prompt_filter_results with no choices and
// "object":"", is no chunk of OpenAI's API: the client gets every other
// chunk, each a chat.completion.chunk, and no chunk without choices but
// the usage it asked for.
func TestAzurePromptFilterChunkIsKeptBack(t *testing.T) {
	f := startNode(t, []upstream{{name: "azure", kind: "azure", in: 1, out: 1}}, nil)
	for _, usage := range []bool{false, true} {
		resp := f.post(fmt.Sprintf(`{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":%v},"max_tokens":3,"messages":[{"role":"user","content":"go"}]}`, usage))
		out := readAll(t, resp.Body)
		chunks, usages := 0, 0
		for _, line := range strings.Split(out, "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var c struct {
				Object  string
				Choices []json.RawMessage
				Usage   *struct {
					TotalTokens int `json:"total_tokens"`
				}
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			chunks++
			if c.Object != "chat.completion.chunk" || len(c.Choices) == 0 && c.Usage == nil {
				t.Errorf("include_usage %v: the client got %s", usage, data)
			}
			if c.Usage != nil {
				usages++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[usage]; resp.StatusCode != 200 || chunks < 4 || usages != want {
			t.Errorf("include_usage %v: %d, %d chunks, %d with usage (want %d): %s", usage, resp.StatusCode, chunks, usages, want, out)
		}
	}
}

// A client that goes away cancels the upstream call: the provider stops
// generating (and charging).
func TestAbandonedRequestCancelsUpstream(t *testing.T) {
	f := startNode(t, []upstream{{name: "slow", kind: "openai", emu: emulator.Config{TTFT: 50 * time.Millisecond, TPS: 10}}}, nil)
	e := f.emus["slow"]
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	wait.For(t, 5*time.Second, "the provider to stop generating", func() bool { return e.Stats().InFlight == 0 })
	if st := e.Stats(); st.StreamsCompleted != 0 {
		t.Fatalf("provider completed the abandoned stream: %+v", st)
	}
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatal("node not serving after an abandoned stream")
	}
}

// soak sends n streams through target, conc at a time, and reports those
// that did not end with a finish chunk followed by [DONE].
func soak(t testing.TB, target, key string, n, conc int) (bad int64, firstBad string) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				why := ""
				resp, err := c.Do(req)
				if err != nil {
					why = err.Error()
				} else {
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					s := string(body)
					switch {
					case err != nil:
						why = fmt.Sprintf("read after %d bytes: %v", len(body), err)
					case resp.StatusCode != 200:
						why = fmt.Sprintf("status %d: %.200s", resp.StatusCode, s)
					case !strings.HasSuffix(s, "data: [DONE]\n\n"):
						why = fmt.Sprintf("no [DONE] (%d bytes): ...%s", len(s), s[max(0, len(s)-120):])
					case !strings.Contains(s[max(0, len(s)-400):], `"finish_reason":"stop"`):
						why = "no finish chunk before [DONE]"
					}
				}
				if why != "" {
					bad := why
					once.Do(func() { firstBad = bad })
					atomic.AddInt64(&bad64, 1)
				}
			}
		})
	}
	wg.Wait()
	return atomic.SwapInt64(&bad64, 0), firstBad
}

var bad64 int64

// TestStreamSoak relays 10,000 streams through a node (LLMESH_SOAK_STREAMS
// sets another number, e.g. 100000), one client connection at a time and
// sixteen at once: every one ends with its finish chunk and [DONE].
func TestStreamSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test skipped in -short mode")
	}
	n := 10000
	if v := os.Getenv("LLMESH_SOAK_STREAMS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("LLMESH_SOAK_STREAMS=%q: want a positive count", v)
		}
	}
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, nil)
	for _, conc := range []int{1, 16} {
		start := time.Now()
		bad, why := soak(t, f.url+"/v1/chat/completions", testKey, n, conc)
		t.Logf("%d at a time: %d streams in %v, %d incomplete", conc, n, time.Since(start).Round(time.Millisecond), bad)
		if bad != 0 {
			t.Fatalf("%d at a time: %d of %d streams incomplete; first: %s", conc, bad, n, why)
		}
	}
	if st := f.emus["p"].Stats(); st.StreamsCompleted != int64(2*n) {
		t.Fatalf("provider completed %d streams, want %d", st.StreamsCompleted, 2*n)
	}
}

// TestReverseProxySoak runs the same soak through a bare
// httputil.ReverseProxy, for comparison. It reports what it sees and
// asserts nothing about the proxy; LLMESH_SOAK_PROXY=1 runs it.
func TestReverseProxySoak(t *testing.T) {
	if testing.Short() || !envSet("LLMESH_SOAK_PROXY") {
		t.Skip("set LLMESH_SOAK_PROXY=1 to soak a bare httputil.ReverseProxy for comparison")
	}
	e, _ := emulator.New(emulator.DefaultConfig())
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	u, _ := url.Parse(e.URL())
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(u)}
	ln := listen(t)
	go srv.Serve(ln)
	defer srv.Close()
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("LLMESH_SOAK_STREAMS")); err == nil && v > 0 {
		n = v
	}
	for _, conc := range []int{1, 16} {
		bad, why := soak(t, "http://"+ln.Addr().String()+"/v1/chat/completions", "x", n, conc)
		t.Logf("ReverseProxy, %d at a time: %d of %d streams incomplete; first: %s", conc, bad, n, why)
	}
}
