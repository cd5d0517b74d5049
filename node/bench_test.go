package node_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
)

// benchFixture is a node in front of one zero-latency emulator, both
// reached over loopback with pooled client connections, and a bare
// httputil.ReverseProxy in front of the same emulator for comparison.
func benchFixture(b *testing.B) (direct, viaNode, viaProxy string, c *http.Client) {
	b.Helper()
	f := startNode(b, []upstream{{name: "emu", kind: "openai"}}, nil)
	c = benchClient(b)
	u, _ := url.Parse(f.emus["emu"].URL())
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	srv := &http.Server{Handler: rp}
	ln := listen(b)
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return f.emus["emu"].URL() + "/v1/chat/completions", f.url + "/v1/chat/completions",
		"http://" + ln.Addr().String() + "/v1/chat/completions", c
}

// benchClient is the benchmarks' client, its idle connections closed at
// the end.
func benchClient(b *testing.B) *http.Client {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(c.CloseIdleConnections)
	return c
}

var (
	benchBody       = []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Explain consistent hashing with bounded loads in one paragraph."}]}`)
	benchStreamBody = []byte(`{"model":"gpt-4o-mini","max_tokens":16,"stream":true,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Explain consistent hashing with bounded loads in one paragraph."}]}`)
)

func doBench(b *testing.B, c *http.Client, url string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n == 0 {
		b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
	}
}

// maxNodeAllocs bounds the allocations the node adds to one request
// (client, node and emulator share the process: the node's share is the
// difference from a request sent straight to the emulator). Issue 24's
// target is what a bare httputil.ReverseProxy adds (92 unary, 101
// streamed); the node added 80 and 90 when this was set.
const maxNodeAllocs = 96

// BenchmarkProxyPath measures one request end to end, sent straight to a
// zero-latency emulator and through a node to it. allocs/op counts the
// whole process (client, node and emulator): the node's own share is the
// difference between the two.
func BenchmarkProxyPath(b *testing.B) {
	direct, viaNode, viaProxy, c := benchFixture(b)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		for _, target := range []struct{ name, url string }{{"direct", direct}, {"proxy", viaProxy}, {"node", viaNode}} {
			b.Run(tc.name+"/"+target.name, func(b *testing.B) {
				doBench(b, c, target.url, tc.body) // warm the pools
				b.ReportAllocs()
				for b.Loop() {
					doBench(b, c, target.url, tc.body)
				}
			})
		}
		// The guard on the hot path: what the node adds to the process's
		// allocations per request.
		allocs := func(url string) float64 {
			return testing.AllocsPerRun(50, func() { doBench(b, c, url, tc.body) })
		}
		if added := allocs(viaNode) - allocs(direct); added > maxNodeAllocs {
			b.Fatalf("%s: the node adds %.0f allocations a request, more than %d", tc.name, added, maxNodeAllocs)
		}
	}
}

// BenchmarkAddedLatency sends requests in turn straight to the emulator,
// through a bare httputil.ReverseProxy and through the node, so that
// machine noise hits all three alike, and reports the percentiles of each
// and what the proxy and the node add at the same percentile.
func BenchmarkAddedLatency(b *testing.B) {
	direct, viaNode, viaProxy, c := benchFixture(b)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		b.Run(tc.name, func(b *testing.B) {
			pct := interleaved(b, []string{direct, viaProxy, viaNode}, func(u string) { doBench(b, c, u, tc.body) })
			for _, p := range []struct {
				name string
				q    float64
			}{{"p50", 0.5}, {"p99", 0.99}} {
				b.ReportMetric(pct(0, p.q), "direct-"+p.name+"-µs")
				b.ReportMetric(pct(1, p.q)-pct(0, p.q), "proxy-adds-"+p.name+"-µs")
				b.ReportMetric(pct(2, p.q)-pct(0, p.q), "node-adds-"+p.name+"-µs")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkForwardHop measures what one forward adds on loopback: an eu
// tenant's request to the eu GPU cluster sent to the eu node (which calls
// it), to the us node (which forwards it to the eu node over gRPC), and,
// for scale, through a bare httputil.ReverseProxy in front of the eu node
// — one bare proxy hop — in turn, so that machine noise hits all alike.
func BenchmarkForwardHop(b *testing.B) {
	f := startRegions(b, regionsUpstreams(emulator.Config{}), nil)
	eu, _ := url.Parse(f.urls["eu"])
	proxy := &http.Server{Handler: httputil.NewSingleHostReverseProxy(eu)}
	ln := listen(b)
	go proxy.Serve(ln)
	b.Cleanup(func() { proxy.Close() })
	viaProxy := "http://" + ln.Addr().String()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(c.CloseIdleConnections)
	send := func(url string, body []byte) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+euKey)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n == 0 || resp.Header.Get("X-LLMesh-Provider") != "gpu-eu" {
			b.Fatalf("status %d from %q, %d bytes", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"), n)
		}
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		b.Run(tc.name, func(b *testing.B) {
			pct := interleaved(b, []string{f.urls["eu"], f.urls["us"], viaProxy}, func(u string) { send(u, tc.body) })
			for _, p := range []struct {
				name string
				q    float64
			}{{"p50", 0.5}, {"p99", 0.99}} {
				b.ReportMetric(pct(0, p.q), "direct-"+p.name+"-µs")
				b.ReportMetric(pct(1, p.q)-pct(0, p.q), "hop-adds-"+p.name+"-µs")
				b.ReportMetric(pct(2, p.q)-pct(0, p.q), "proxy-hop-adds-"+p.name+"-µs")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// interleaved sends one request to each target in turn, every iteration,
// so that machine noise hits them alike, and returns the percentile (in
// µs) of target i's latencies.
func interleaved(b *testing.B, targets []string, send func(string)) (pct func(i int, q float64) float64) {
	lat := make([][]time.Duration, len(targets))
	for _, u := range targets {
		send(u) // warm the pools
	}
	for b.Loop() {
		for i, u := range targets {
			t0 := time.Now()
			send(u)
			lat[i] = append(lat[i], time.Since(t0))
		}
	}
	for i := range lat {
		slices.Sort(lat[i])
	}
	return func(i int, q float64) float64 {
		s := lat[i]
		return float64(s[min(len(s)-1, int(q*float64(len(s))))].Microseconds())
	}
}
