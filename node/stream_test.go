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
