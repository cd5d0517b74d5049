package node_test

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// benchFixture is a node in front of one zero-latency emulator, both
// reached over loopback with pooled client connections.
func benchFixture(b *testing.B) (direct, viaNode string, c *http.Client) {
	b.Helper()
	f := startNode(b, []upstream{{name: "emu", kind: "openai"}}, nil)
	c = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(c.CloseIdleConnections)
	return f.emus["emu"].URL() + "/v1/chat/completions", f.url + "/v1/chat/completions", c
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

// BenchmarkProxyPath measures one request end to end, sent straight to a
// zero-latency emulator and through a node to it. allocs/op counts the
// whole process (client, node and emulator): the node's own share is the
// difference between the two.
func BenchmarkProxyPath(b *testing.B) {
	direct, viaNode, c := benchFixture(b)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		for _, target := range []struct{ name, url string }{{"direct", direct}, {"node", viaNode}} {
			b.Run(tc.name+"/"+target.name, func(b *testing.B) {
				doBench(b, c, target.url, tc.body) // warm the pools
				b.ReportAllocs()
				for b.Loop() {
					doBench(b, c, target.url, tc.body)
				}
			})
		}
	}
}

// BenchmarkAddedLatency sends requests alternately straight to the
// emulator and through the node, so that machine noise hits both alike,
// and reports the percentiles of each and of the difference.
func BenchmarkAddedLatency(b *testing.B) {
	direct, viaNode, c := benchFixture(b)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		b.Run(tc.name, func(b *testing.B) {
			doBench(b, c, direct, tc.body)
			doBench(b, c, viaNode, tc.body)
			var d, n []time.Duration
			for b.Loop() {
				t0 := time.Now()
				doBench(b, c, direct, tc.body)
				t1 := time.Now()
				doBench(b, c, viaNode, tc.body)
				d = append(d, t1.Sub(t0))
				n = append(n, time.Since(t1))
			}
			slices.Sort(d)
			slices.Sort(n)
			pct := func(s []time.Duration, p float64) float64 {
				return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds())
			}
			b.ReportMetric(pct(d, 0.5), "direct-p50-µs")
			b.ReportMetric(pct(n, 0.5), "node-p50-µs")
			b.ReportMetric(pct(n, 0.5)-pct(d, 0.5), "added-p50-µs")
			b.ReportMetric(pct(d, 0.99), "direct-p99-µs")
			b.ReportMetric(pct(n, 0.99), "node-p99-µs")
			b.ReportMetric(pct(n, 0.99)-pct(d, 0.99), "added-p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
