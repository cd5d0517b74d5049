package node_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// benchEndpoints are a request of each endpoint, as the benchmark sends it
// to the emulator and to the node in front of it.
var benchEndpoints = []struct {
	name, path, body string
	direct           string // the body sent straight to the emulator, when not body
}{
	{"chat", "/v1/chat/completions", string(benchBody), ""},
	{"chat-stream", "/v1/chat/completions", string(benchStreamBody), ""},
	{"embeddings", "/v1/embeddings", `{"model":"emb","input":["Explain consistent hashing with bounded loads in one paragraph.","and again"]}`, ""},
	{"completions", "/v1/completions", `{"model":"gpt-4o-mini","max_tokens":16,"prompt":"Explain consistent hashing with bounded loads in one paragraph."}`, ""},
	{"completions-stream", "/v1/completions", `{"model":"gpt-4o-mini","max_tokens":16,"stream":true,"prompt":"Explain consistent hashing with bounded loads in one paragraph."}`, ""},
	{"messages", "/v1/messages", `{"model":"gpt-4o-mini","max_tokens":16,"system":"You are terse.","messages":[{"role":"user","content":"Explain consistent hashing with bounded loads in one paragraph."}]}`, ""},
	{"messages-stream", "/v1/messages", `{"model":"gpt-4o-mini","max_tokens":16,"stream":true,"system":"You are terse.","messages":[{"role":"user","content":"Explain consistent hashing with bounded loads in one paragraph."}]}`, ""},
	{"responses", "/v1/responses", `{"model":"gpt-4o-mini","max_output_tokens":16,"instructions":"You are terse.","input":"Explain consistent hashing with bounded loads in one paragraph."}`, ""},
	{"responses-stream", "/v1/responses", `{"model":"gpt-4o-mini","max_output_tokens":16,"stream":true,"instructions":"You are terse.","input":"Explain consistent hashing with bounded loads in one paragraph."}`, ""},
	// Bridged: the node sends a vLLM chat completions; the direct figure
	// is the emulator's own Responses endpoint.
	{"responses-bridged", "/v1/responses", `{"model":"llama","max_output_tokens":16,"instructions":"You are terse.","input":"Explain consistent hashing with bounded loads in one paragraph."}`,
		`{"model":"gpt-4o-mini","max_output_tokens":16,"instructions":"You are terse.","input":"Explain consistent hashing with bounded loads in one paragraph."}`},
	{"responses-bridged-stream", "/v1/responses", `{"model":"llama","max_output_tokens":16,"stream":true,"instructions":"You are terse.","input":"Explain consistent hashing with bounded loads in one paragraph."}`,
		`{"model":"gpt-4o-mini","max_output_tokens":16,"stream":true,"instructions":"You are terse.","input":"Explain consistent hashing with bounded loads in one paragraph."}`},
}

// BenchmarkEndpoints reports, for each endpoint, what the node adds to a
// request sent straight to a zero-latency emulator speaking it: latency at
// the median and p99 (requests sent in turn, so that machine noise hits
// both alike) and allocations (the whole process's, client and emulator
// included, less the direct request's). Messages is translated to chat at
// the node, so its direct figure is the emulator's own Messages endpoint.
func BenchmarkEndpoints(b *testing.B) {
	f := startNode(b, []upstream{{name: "emu", kind: "openai", embeddings: []string{"emb"}}, {name: "vllm", kind: "vllm", models: []string{"llama"}}}, nil)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(c.CloseIdleConnections)
	for _, ep := range benchEndpoints {
		direct, viaNode := f.emus["emu"].URL()+ep.path, f.url+ep.path
		send := func(url string) {
			body := ep.body
			if url == direct && ep.direct != "" {
				body = ep.direct
			}
			sendEndpoint(b, c, url, []byte(body))
		}
		b.Run(ep.name, func(b *testing.B) {
			pct := interleaved(b, []string{direct, viaNode}, send)
			allocs := func(url string) float64 { return testing.AllocsPerRun(20, func() { send(url) }) }
			b.ReportMetric(pct(1, 0.5)-pct(0, 0.5), "node-adds-p50-µs")
			b.ReportMetric(pct(1, 0.99)-pct(0, 0.99), "node-adds-p99-µs")
			b.ReportMetric(allocs(viaNode)-allocs(direct), "node-adds-allocs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func sendEndpoint(b *testing.B, c *http.Client, url string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || n == 0 {
		b.Fatalf("%s: status %d, %d bytes", url, resp.StatusCode, n)
	}
}
