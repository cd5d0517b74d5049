package node_test

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/audit"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

const otherKey = "sk-test-other-tenant-0123"

// startCached is a node with the response cache on, opted into by the
// tenants t1 (testKey) and t2 (otherKey) and by the group cached,
// before one OpenAI provider in the eu, which serves an embedding model
// too; edit, if given, adjusts the configuration.
func startCached(t testing.TB, edit ...func(*node.Config)) *fixture {
	t.Helper()
	return startNode(t, []upstream{{name: "p", kind: "openai", in: 1, out: 2, embeddings: []string{"emb"}}}, func(c *node.Config) {
		c.Cache = node.CacheSection{Enabled: true}
		c.Tenants[0].Cache = true
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "t2", KeySHA256: []string{sha(otherKey)}, Cache: true},
			node.TenantSection{Name: "t3", KeySHA256: []string{sha(euKey)}})
		c.Groups = []node.GroupSection{{Name: "cached", Members: []string{"gpt-4o-mini"}, Cache: true}}
		for _, e := range edit {
			e(c)
		}
	})
}

const zeroTemp = `{"model":"gpt-4o-mini","temperature":0,"max_tokens":6,"messages":[{"role":"user","content":"What is a mesh?"}]}`

// zeroCostRe finds the costs an answer tells, in usage and in a
// stream's cost comment.
var zeroCostRe = regexp.MustCompile(`("cost":|: X-LLMesh-Cost: )[0-9.e-]+`)

// providerCalls is how many requests the provider p received.
func (f *fixture) providerCalls() int64 { return f.emus["p"].Stats().Requests }

// A repeated temperature-0 request is answered from the cache, unary and
// streamed, through the official client: the same body (or the same
// events), no provider call, X-LLMesh-Cache: hit, the provider that made
// the answer named, no cost; counted in the metrics and recorded as a
// cache hit.
func TestCacheHitRepeatsTheAnswer(t *testing.T) {
	f := startCached(t)
	for _, body := range []string{zeroTemp, strings.Replace(zeroTemp, `{`, `{"stream":true,`, 1)} {
		first := postAs(t, f.url, testKey, body)
		firstBody := readAll(t, first.Body)
		calls := f.providerCalls()
		second := postAs(t, f.url, testKey, body)
		secondBody := readAll(t, second.Body)
		if first.StatusCode != 200 || first.Header.Get("X-LLMesh-Cache") != "miss" || second.Header.Get("X-LLMesh-Cache") != "hit" {
			t.Fatalf("%s: %d %q then %q", body, first.StatusCode, first.Header.Get("X-LLMesh-Cache"), second.Header.Get("X-LLMesh-Cache"))
		}
		// The same answer, but free: usage.cost and the cost told are 0.
		want := zeroCostRe.ReplaceAllString(firstBody, "${1}0")
		if secondBody != want || secondBody == firstBody || f.providerCalls() != calls {
			t.Fatalf("the hit: %d more provider calls, body\n%s\nwant\n%s", f.providerCalls()-calls, secondBody, want)
		}
		h := second.Header
		if strings.Contains(body, "stream") != strings.Contains(secondBody, "\n: X-LLMesh-Cost: 0\n\ndata: [DONE]") ||
			strings.Contains(body, "stream") == (h.Get("X-LLMesh-Cost") == "0") {
			t.Fatalf("a hit's cost is not told as 0: header %q, body\n%s", h.Get("X-LLMesh-Cost"), secondBody)
		}
		if h.Get("X-LLMesh-Provider") != "p" || h.Get("X-LLMesh-Node") != "test-1" || h.Get("X-LLMesh-Via") != "test-1" ||
			!strings.HasPrefix(h.Get("X-LLMesh-Route"), "cache hit") || h.Get("Content-Type") != first.Header.Get("Content-Type") {
			t.Fatalf("hit headers %v", h)
		}
	}
	// The client reads hits as any answer, whole and streamed.
	c := client(f)
	params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Temperature: openai.Float(0), MaxTokens: openai.Int(6),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is a mesh?")}}
	var hdr *http.Response
	resp, err := c.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&hdr))
	if err != nil || hdr.Header.Get("X-LLMesh-Cache") != "hit" || resp.Choices[0].Message.Content == "" || resp.Usage.CompletionTokens != 6 {
		t.Fatalf("client: %v %q %+v", err, hdr.Header.Get("X-LLMesh-Cache"), resp)
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&hdr))
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	// Its body is the raw stream's above, in another order: the same key.
	if err := st.Err(); err != nil || hdr.Header.Get("X-LLMesh-Cache") != "hit" || acc.Choices[0].Message.Content == "" {
		t.Fatalf("client stream: %v %q %q", err, hdr.Header.Get("X-LLMesh-Cache"), acc.Choices[0].Message.Content)
	}
	if n := f.providerCalls(); n != 2 {
		t.Fatalf("the provider was called %d times for two distinct requests", n)
	}
	// A stream's client has its last event before the node accounts the
	// request: the count of answers is waited for.
	var metrics string
	wait.For(t, 10*time.Second, "the fourth hit counted among the answers", func() bool {
		metrics = readAll(t, mustGet(t, f.url+"/metrics").Body)
		return strings.Contains(metrics, `llmesh_requests_total{code="200",endpoint="chat",model="gpt-4o-mini",provider="cache"} 4`)
	})
	for _, want := range []string{`llmesh_cache_requests_total{result="hit"} 4`, `llmesh_cache_requests_total{result="miss"} 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, "llmesh_cache_bytes 0\n") {
		t.Error("the cache holds nothing")
	}
	var doc views.Decisions
	wait.For(t, 10*time.Second, "the last decision", func() bool {
		doc = views.Decisions{}
		getJSON(t, f.url+"/v1/mesh/decisions?limit=1", "", &doc)
		return len(doc.Decisions) == 1 && doc.Decisions[0].Stream
	})
	if d := doc.Decisions[0]; d.Outcome != "cache_hit" || d.Provider != "cache" || d.CostUSD != 0 || len(d.Attempts) != 0 || !strings.HasPrefix(d.Why, "cache hit") {
		t.Fatalf("decision %+v", d)
	}
}

// An answer is never served across tenants or residencies: the same
// body from another tenant, or from the same tenant narrowed to the eu,
// is a miss (and then a hit of its own, in the audit trail with the
// provider cache); a key that does not authenticate gets 401, never the
// answer.
func TestCacheScope(t *testing.T) {
	dir := t.TempDir()
	f := startCached(t, func(c *node.Config) { c.Audit = node.AuditSection{Dir: dir} })
	readAll(t, postAs(t, f.url, testKey, zeroTemp).Body)
	calls := f.providerCalls()
	for _, c := range []struct {
		name string
		key  string
		hdr  []string
	}{
		{"another tenant", otherKey, nil},
		{"a narrower residency", testKey, []string{"X-LLMesh-Residency", "eu"}},
	} {
		for i, want := range []string{"miss", "hit"} {
			resp := postAs(t, f.url, c.key, zeroTemp, append([]string{"X-Request-Id", strings.ReplaceAll(c.name, " ", "-") + "-" + want}, c.hdr...)...)
			readAll(t, resp.Body)
			if got := resp.Header.Get("X-LLMesh-Cache"); resp.StatusCode != 200 || got != want {
				t.Fatalf("%s, request %d: %d %q, want %s", c.name, i, resp.StatusCode, got, want)
			}
		}
		if calls++; f.providerCalls() != calls {
			t.Fatalf("%s: %d provider calls, want %d", c.name, f.providerCalls(), calls)
		}
	}
	if resp := postAs(t, f.url, "sk-not-a-key", zeroTemp); resp.StatusCode != 401 || resp.Header.Get("X-LLMesh-Cache") != "" {
		t.Fatalf("an unknown key: %d %q", resp.StatusCode, resp.Header.Get("X-LLMesh-Cache"))
	}
	trail := map[string]audit.Record{}
	wait.For(t, 5*time.Second, "the eu requests' records", func() bool {
		clear(trail)
		_, err := audit.Scan(dir, func(r audit.Record) error { trail[r.RequestID] = r; return nil })
		return err == nil && len(trail) == 2
	})
	miss, hit := trail["a-narrower-residency-miss"], trail["a-narrower-residency-hit"]
	if miss.Provider != "p" || miss.Outcome != "ok" || hit.Provider != "cache" || hit.Outcome != "cache_hit" || hit.Residency != "eu" {
		t.Fatalf("audit: miss %+v, hit %+v", miss, hit)
	}
}

// Only what is reusable is cached: not without temperature 0 (unless
// the request asks with X-LLMesh-Cache: on), not with off, not for a
// tenant that did not opt in (unless its group did); a bad header is
// refused.
func TestCacheEligibility(t *testing.T) {
	f := startCached(t)
	sampled := strings.Replace(zeroTemp, `"temperature":0`, `"temperature":0.7`, 1)
	for _, c := range []struct {
		name  string
		key   string
		body  string
		hdr   []string
		want  [2]string // X-LLMesh-Cache of the first and second answer
		calls int64     // provider calls for the two
	}{
		{"sampled", testKey, sampled, nil, [2]string{"", ""}, 2},
		{"no temperature", testKey, strings.Replace(zeroTemp, `"temperature":0,`, ``, 1), nil, [2]string{"", ""}, 2},
		{"sampled, asked for", testKey, sampled, []string{"X-LLMesh-Cache", "on"}, [2]string{"miss", "hit"}, 1},
		{"refused", testKey, strings.Replace(zeroTemp, `"What`, `"Well, what`, 1), []string{"X-LLMesh-Cache", "off"}, [2]string{"", ""}, 2},
		{"not opted in", euKey, zeroTemp, nil, [2]string{"", ""}, 2},
		{"not opted in, asked for", euKey, strings.Replace(zeroTemp, `"What`, `"So what`, 1), []string{"X-LLMesh-Cache", "on"}, [2]string{"miss", "hit"}, 1},
		{"not opted in, its group is", euKey, strings.Replace(zeroTemp, `"gpt-4o-mini"`, `"cached"`, 1), nil, [2]string{"miss", "hit"}, 1},
	} {
		calls := f.providerCalls()
		for i := range 2 {
			resp := postAs(t, f.url, c.key, c.body, c.hdr...)
			readAll(t, resp.Body)
			if got := resp.Header.Get("X-LLMesh-Cache"); resp.StatusCode != 200 || got != c.want[i] {
				t.Fatalf("%s, request %d: %d %q, want %q", c.name, i, resp.StatusCode, got, c.want[i])
			}
		}
		if n := f.providerCalls() - calls; n != c.calls {
			t.Fatalf("%s: %d provider calls, want %d", c.name, n, c.calls)
		}
	}
	if resp := postAs(t, f.url, testKey, zeroTemp, "X-LLMesh-Cache", "maybe"); resp.StatusCode != 400 ||
		!strings.Contains(readAll(t, resp.Body), `X-LLMesh-Cache: \"maybe\" must be on or off`) {
		t.Fatalf("a bad header: %d", resp.StatusCode)
	}
	if !strings.Contains(readAll(t, mustGet(t, f.url+"/metrics").Body), `llmesh_cache_requests_total{result="bypass"} 6`) {
		t.Error("bypasses not counted: twice each sampled, without temperature, off")
	}
}

// Only a complete 200 is stored: a stream the provider broke off (the
// client told so by an error event), a refusal or an error is not, and
// the same request is sent to the provider again, then served from the
// cache once answered whole.
func TestCacheStoresOnlyCompleteAnswers(t *testing.T) {
	f := startCached(t)
	for i, c := range []struct {
		mode   emulator.Mode
		stream bool
	}{{emulator.ModeCut, true}, {emulator.ModeCut, false}, {emulator.ModeContentFilter, false}, {emulator.ModeError, true}} {
		// Each case asks its own question: another key.
		body := strings.Replace(zeroTemp, "a mesh", "mesh "+strconv.Itoa(i), 1)
		if c.stream {
			body = strings.Replace(body, `{`, `{"stream":true,`, 1)
		}
		if err := f.emus["p"].SetMode(c.mode); err != nil {
			t.Fatal(err)
		}
		readAll(t, postAs(t, f.url, testKey, body).Body)
		if err := f.emus["p"].SetMode(emulator.ModeUp); err != nil {
			t.Fatal(err)
		}
		calls := f.providerCalls()
		for j, want := range []string{"miss", "hit"} {
			resp := postAs(t, f.url, testKey, body)
			got := readAll(t, resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Cache") != want || strings.Contains(got, `"error"`) {
				t.Fatalf("%s, stream %v, then up, request %d: %d %q, want %s\n%s", c.mode, c.stream, j, resp.StatusCode,
					resp.Header.Get("X-LLMesh-Cache"), want, got)
			}
		}
		if n := f.providerCalls() - calls; n != 1 {
			t.Fatalf("%s, stream %v: %d provider calls for a miss and a hit", c.mode, c.stream, n)
		}
	}
}

// Without cache.enabled X-LLMesh-Cache does nothing: whatever it says,
// the request is served as any other and its answer says nothing of a
// cache.
func TestCacheHeaderWithoutCache(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai", in: 1, out: 2}}, nil)
	for _, v := range []string{"on", "off", "hit", "maybe"} {
		resp := postAs(t, f.url, testKey, zeroTemp, "X-LLMesh-Cache", v)
		readAll(t, resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Cache") != "" {
			t.Errorf("X-LLMesh-Cache: %s: %d %q", v, resp.StatusCode, resp.Header.Get("X-LLMesh-Cache"))
		}
	}
}

// Embeddings and Anthropic's Messages, whole and streamed, are cached as
// chat is: a hit on the second, through the official clients.
func TestCacheOtherEndpoints(t *testing.T) {
	f := startCached(t)
	c := client(f)
	for i, want := range []string{"miss", "hit"} {
		var hdr *http.Response
		resp, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "emb",
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("Bonjour")}}, option.WithResponseInto(&hdr))
		if err != nil || hdr.Header.Get("X-LLMesh-Cache") != want || len(resp.Data) != 1 {
			t.Fatalf("embeddings %d: %v %q", i, err, hdr.Header.Get("X-LLMesh-Cache"))
		}
	}
	// The Messages client sends no temperature: it asks for the cache.
	ac := anthropic.NewClient(aoption.WithBaseURL(f.url), aoption.WithAPIKey(testKey), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-LLMesh-Cache", "on"))
	for _, stream := range []bool{false, true} {
		var texts []string
		for i, want := range []string{"miss", "hit"} {
			m, h := sendMessage(t, ac, anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 5,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Bonjour"))}}, stream)
			if h.Get("X-LLMesh-Cache") != want || len(m.Content) != 1 || m.Usage.OutputTokens != 5 {
				t.Fatalf("messages, stream %v, %d: %q %s", stream, i, h.Get("X-LLMesh-Cache"), m.RawJSON())
			}
			texts = append(texts, m.Content[0].Text)
		}
		if texts[0] != texts[1] {
			t.Fatalf("stream %v: the hit's text %q, the miss's %q", stream, texts[1], texts[0])
		}
	}
	if n := f.providerCalls(); n != 3 {
		t.Fatalf("%d provider calls, want 3 (embeddings, a message, a streamed message)", n)
	}
}

// BenchmarkCacheHit measures a request end to end through a node, its
// answer from the provider (a zero-latency emulator; the request is not
// reusable, at temperature 0.7) and from the cache, whole and streamed.
func BenchmarkCacheHit(b *testing.B) {
	f := startCached(b)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(c.CloseIdleConnections)
	for _, tc := range []struct {
		name string
		body string
	}{{"unary", zeroTemp}, {"stream", strings.Replace(zeroTemp, `{`, `{"stream":true,`, 1)}} {
		for _, from := range []struct{ name, body string }{
			{"provider", strings.Replace(tc.body, `"temperature":0`, `"temperature":0.7`, 1)}, {"cache", tc.body},
		} {
			b.Run(tc.name+"/"+from.name, func(b *testing.B) {
				doBench(b, c, f.url+"/v1/chat/completions", []byte(from.body)) // warm the pools, and the cache
				calls := f.providerCalls()
				b.ReportAllocs()
				for b.Loop() {
					doBench(b, c, f.url+"/v1/chat/completions", []byte(from.body))
				}
				if from.name == "cache" && f.providerCalls() != calls {
					b.Fatal("a hit called the provider")
				}
			})
		}
	}
}
