package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/chromedp/chromedp"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// What the cached upstreams report of every answer: OpenAI's 2006
// prompt tokens, 1920 of them cached; Anthropic's 50 input tokens, 1000
// read from the cache and 200 written to it.
const (
	oaiPrompt, oaiCached, oaiCompletion = 2006, 1920, 7
	anthInput, anthRead, anthWrite      = 50, 1000, 200
	anthOutput                          = 7
)

// cachedUpstream starts a provider that answers every request, whole or
// streamed as the body asks, with answer(stream).
func cachedUpstream(t *testing.T, answer func(w http.ResponseWriter, stream bool)) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		answer(w, bytes.Contains(body, []byte(`"stream":true`)))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// openAICached answers as OpenAI does with a warm prompt cache.
func openAICached(w http.ResponseWriter, stream bool) {
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d,"audio_tokens":0}}`,
		oaiPrompt, oaiCompletion, oaiPrompt+oaiCompletion, oaiCached)
	head := `{"id":"chatcmpl-c1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini",`
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-c1","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":%s}`, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range []string{
		head + `"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}],"usage":null}`,
		head + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		head + `"choices":[],"usage":` + usage + `}`,
		"[DONE]",
	} {
		fmt.Fprintf(w, "data: %s\n\n", c)
	}
}

// anthropicCached answers as Anthropic's Messages API does when the
// prompt's prefix is cached and its tail written to the cache.
func anthropicCached(w http.ResponseWriter, stream bool) {
	usage := fmt.Sprintf(`{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":%%d}`, anthInput, anthWrite, anthRead)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_c1","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hi"}],`+
			`"stop_reason":"end_turn","stop_sequence":null,"usage":`+usage+`}`, anthOutput)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range [][2]string{
		{"message_start", `{"type":"message_start","message":{"id":"msg_c1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"usage":` + fmt.Sprintf(usage, 1) + `}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, anthOutput)},
		{"message_stop", `{"type":"message_stop"}`},
	} {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev[0], ev[1])
	}
}

// Prices of the two cached providers, per million tokens.
const (
	oaiIn, oaiCachedIn, oaiOut    = 2.5, 1.25, 10
	anthIn, anthCachedIn, anthOut = 3, 0.3, 15
)

// withCachedProviders adds an OpenAI-kind provider of gpt-4o-mini and an
// Anthropic one of claude-x, both reporting cached tokens, to a single
// voter whose tenant has a budget.
func withCachedProviders(t *testing.T) func(*node.Config) {
	oai, anth := cachedUpstream(t, openAICached), cachedUpstream(t, anthropicCached)
	return func(c *node.Config) {
		c.Node.Voter, c.Node.BootstrapExpect = true, 1
		c.Node.Raft, c.Node.RPC, c.Node.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
		c.Tenants[0].Budget = &node.BudgetSection{USD: 5, Period: "month"}
		// A voter just elected may take more than the default 2s to
		// grant its first escrow on a busy machine.
		c.Limits.AdmissionWait = node.Duration(20 * time.Second)
		c.Providers = append(c.Providers,
			node.ProviderSection{Name: "oai", Kind: "openai", Region: "eu-west", BaseURL: oai, Models: []node.ModelSection{{Name: "gpt-4o-mini",
				InputUSDPerMTok: oaiIn, OutputUSDPerMTok: oaiOut, CachedInputUSDPerMTok: new(float64(oaiCachedIn))}}},
			node.ProviderSection{Name: "claude", Kind: "anthropic", Region: "eu-west", BaseURL: anth, Models: []node.ModelSection{{Name: "claude-x",
				InputUSDPerMTok: anthIn, OutputUSDPerMTok: anthOut, CachedInputUSDPerMTok: new(float64(anthCachedIn))}}},
		)
	}
}

// An upstream that reports cached prompt tokens is charged for them at
// the model's cached input price: OpenAI's cached_tokens, whole and
// streamed, and Anthropic's cache reads (its cache writes at the input
// price), whole and streamed. Each decision shows the cached tokens and
// a cost equal to the formula to the nano-dollar, the ledger settles
// the sum, the metric counts them, the provider's hit ratio is what
// they say, and a /v1/messages client reads them as cache reads.
func TestCachedTokensChargedAndSettled(t *testing.T) {
	f := startNode(t, nil, withCachedProviders(t))
	// The prompt's bytes bound its tokens: long enough that the
	// reservation covers what the upstreams claim.
	long := strings.Repeat("You are a careful assistant. ", 100)
	body := func(model string, stream bool) string {
		return fmt.Sprintf(`{"model":%q,"stream":%t,"max_tokens":16,"messages":[{"role":"system","content":%q},{"role":"user","content":"Hi"}]}`, model, stream, long)
	}
	oaiCost := ((oaiPrompt-oaiCached)*oaiIn + oaiCached*oaiCachedIn + oaiCompletion*oaiOut) / 1e6
	// Anthropic's prompt is its input, cache reads and cache writes; the
	// writes are charged at the input price.
	anthCost := ((anthInput+anthWrite)*anthIn + anthRead*anthCachedIn + anthOutput*anthOut) / 1e6
	want := map[string]struct {
		prompt, cached int
		cost           float64
	}{"gpt-4o-mini": {oaiPrompt, oaiCached, oaiCost}, "claude-x": {anthInput + anthRead + anthWrite, anthRead, anthCost}}
	for _, model := range []string{"gpt-4o-mini", "claude-x"} {
		for _, stream := range []bool{false, true} {
			resp := f.post(body(model, stream))
			out := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream=%t: %d %s", model, stream, resp.StatusCode, out)
			}
			if cached := fmt.Sprintf(`"prompt_tokens_details":{"cached_tokens":%d`, want[model].cached); model == "claude-x" && !stream && !strings.Contains(out, cached) {
				t.Fatalf("an Anthropic provider's cache reads are not chat's cached tokens: %s", out)
			}
		}
	}
	// A Messages client of the OpenAI-kind provider reads its cached
	// tokens as Anthropic counts them.
	msg, _ := sendMessage(t, anthropicAt(f.url, testKey), anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 16,
		System:   []anthropic.TextBlockParam{{Text: long}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi"))}}, false)
	if msg.Usage.CacheReadInputTokens != oaiCached || msg.Usage.InputTokens != oaiPrompt-oaiCached {
		t.Fatalf("a Messages client read usage %+v, want %d cache reads and %d input tokens", msg.Usage, oaiCached, oaiPrompt-oaiCached)
	}

	var doc views.Decisions
	wait.For(t, 10*time.Second, "the five decisions", func() bool {
		doc = views.Decisions{}
		getJSON(t, f.url+"/v1/mesh/decisions?limit=5", "", &doc)
		return len(doc.Decisions) == 5
	})
	total := 0.0
	for _, d := range doc.Decisions {
		w := want[d.Model]
		if d.Outcome != "ok" || d.PromptTokens != w.prompt || d.CachedTokens != w.cached || math.Abs(d.CostUSD-w.cost) > 1e-9 {
			t.Errorf("decision %s %s: %d prompt tokens, %d cached, $%.9f; want %d, %d, $%.9f", d.Endpoint, d.Model,
				d.PromptTokens, d.CachedTokens, d.CostUSD, w.prompt, w.cached, w.cost)
		}
		total += d.CostUSD
	}
	if math.Abs(total-(3*oaiCost+2*anthCost)) > 1e-9 {
		t.Fatalf("decisions cost $%.9f in all", total)
	}
	wait.For(t, 10*time.Second, "the ledger to settle the cached prices", func() bool {
		for _, b := range budgetsOf(t, f.url) {
			if b.Tenant == "t1" {
				return math.Abs(b.SettledUSD-total) < 1e-9 && b.OverspendUSD == 0
			}
		}
		return false
	})

	metrics := readAll(t, mustGet(t, f.url+"/metrics").Body)
	for _, m := range []string{
		fmt.Sprintf(`llmesh_prompt_cached_tokens_total{model="gpt-4o-mini",provider="oai"} %d`, 3*oaiCached),
		fmt.Sprintf(`llmesh_prompt_cached_tokens_total{model="claude-x",provider="claude"} %d`, 2*anthRead),
	} {
		if !strings.Contains(metrics, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
	for name, ratio := range map[string]float64{"oai": float64(oaiCached) / oaiPrompt, "claude": float64(anthRead) / (anthInput + anthRead + anthWrite)} {
		if v := providerView(t, f.url, name); math.Abs(v.CacheHitRatio-ratio) > 1e-9 {
			t.Errorf("%s's cache hit ratio %g, want %g", name, v.CacheHitRatio, ratio)
		}
	}
	// The next plan expects the hit ratio observed of the prompt cached,
	// and its bound none.
	var ex views.Explanation
	if resp := postPath(t, f.url+"/v1/route/explain", testKey, body("gpt-4o-mini", false)); resp.StatusCode != 200 {
		t.Fatalf("explain: %s", resp.Status)
	} else if err := json.NewDecoder(resp.Body).Decode(&ex); err != nil || len(ex.Targets) == 0 {
		t.Fatalf("explain: %v %+v", err, ex)
	}
	hit, p := float64(oaiCached)/oaiPrompt, float64(ex.PromptTokens)
	est := (p*(1-hit)*oaiIn + p*hit*oaiCachedIn + float64(ex.OutputTokens)*oaiOut) / 1e6
	if tg := ex.Targets[0]; math.Abs(tg.EstCostUSD-est) > 1e-12 || !strings.Contains(strings.Join(tg.Why, "; "), "96% of the prompt expected from the provider's cache") {
		t.Fatalf("the plan's estimate $%.9f, want $%.9f with the warm cache: %+v", tg.EstCostUSD, est, tg)
	}
}

// The dashboard shows each provider's cache hit ratio in its row, a
// chart of the share of prompt tokens served from cache, and each
// decision's cached tokens.
func TestDashboardShowsCacheHits(t *testing.T) {
	skipWithoutChromium(t)
	f := startNode(t, nil, func(c *node.Config) {
		withCachedProviders(t)(c)
		c.Node.AdminTokenEnv = uiAdminEnv
	})
	for _, model := range []string{"gpt-4o-mini", "claude-x"} {
		if resp := f.post(`{"model":"` + model + `","max_tokens":16,"messages":[{"role":"user","content":"` + strings.Repeat("cached prefix ", 200) + `"}]}`); resp.StatusCode != 200 {
			t.Fatalf("%s: %s", model, resp.Status)
		}
	}
	br := newBrowser(t)
	br.run("sign in", 30*time.Second,
		chromedp.Navigate(f.url+"/ui/?every=0.5"),
		chromedp.WaitVisible(`input[name=token]`),
		chromedp.SendKeys(`input[name=token]`, uiAdminToken),
		chromedp.Submit(`input[name=token]`))
	br.run("the providers' cache hits and the chart", 30*time.Second,
		br.until(`document.querySelector('tr[data-provider="oai"] td.cache-hit')?.textContent === "96%"`),
		br.until(`document.querySelector('tr[data-provider="claude"] td.cache-hit')?.textContent === "80%"`),
		br.until(`Number(document.querySelector("#chart-cache")?.dataset.points) > 0`),
		br.until(`[...document.querySelectorAll("#decisions td.cached")].some((td) => td.textContent.replace(/[^0-9 of]/g, "") === "1920 of 2006")`),
		chromedp.WaitVisible(`#chart-cache path[data-key="oai"]`))
	br.shot("cache-hits")
}
