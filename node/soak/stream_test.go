package soak_test

import (
	"fmt"
	"io"
	"net"
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

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
)

// startStreamNode starts a node in front of one emulated provider, p, of
// OpenAI's kind serving gpt-4o-mini at no cost, and returns the node's
// URL and the emulator.
func startStreamNode(t *testing.T) (string, *emulator.Emulator) {
	t.Helper()
	e, p := startProvider(t, 0, 0)
	n := harness.StartNode(t, nodeConfig("test-1", "eu-west", []node.ProviderSection{p}), node.Options{Getenv: func(string) string { return "" }})
	return "http://" + n.HTTPAddr(), e
}

// soak sends n streams through target, conc at a time, and reports those
// that did not end with a finish chunk followed by [DONE].
func soak(t testing.TB, target, key string, n, conc int) (bad int64, firstBad string) {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var next, incomplete atomic.Int64
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
					incomplete.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return incomplete.Load(), firstBad
}

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
	base, e := startStreamNode(t)
	for _, conc := range []int{1, 16} {
		start := time.Now()
		bad, why := soak(t, base+"/v1/chat/completions", testKey, n, conc)
		t.Logf("%d at a time: %d streams in %v, %d incomplete", conc, n, time.Since(start).Round(time.Millisecond), bad)
		if bad != 0 {
			t.Fatalf("%d at a time: %d of %d streams incomplete; first: %s", conc, bad, n, why)
		}
	}
	if st := e.Stats(); st.StreamsCompleted != int64(2*n) {
		t.Fatalf("provider completed %d streams, want %d", st.StreamsCompleted, 2*n)
	}
}

// TestReverseProxySoak runs the same soak through a bare
// httputil.ReverseProxy, for comparison. It reports what it sees and
// asserts nothing about the proxy; LLMESH_SOAK_PROXY=1 runs it.
func TestReverseProxySoak(t *testing.T) {
	if testing.Short() || os.Getenv("LLMESH_SOAK_PROXY") == "" {
		t.Skip("set LLMESH_SOAK_PROXY=1 to soak a bare httputil.ReverseProxy for comparison")
	}
	e := harness.StartEmulator(t, emulator.DefaultConfig())
	u, _ := url.Parse(e.URL())
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(u)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
