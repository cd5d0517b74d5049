package route

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route/anthropic"
)

// Provider refusals in their real shapes, as the executor holds them.
var (
	azureContentFilter  = `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},"violence":{"filtered":true,"severity":"medium"}}}}}`
	openAIContextLength = `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	openAIBadParam      = `{"error":{"message":"Invalid value for 'temperature': must be at most 2.","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`
)

func TestRefusalClass(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   FallbackClass
	}{
		{"azure content filter", 400, azureContentFilter, FallbackContentFilter},
		{"azure inner error only", 400, `{"error":{"message":"filtered","code":"400","innererror":{"code":"ResponsibleAIPolicyViolation"}}}`, FallbackContentFilter},
		{"openai invalid_prompt", 400, `{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a different prompt.","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}`, FallbackContentFilter},
		{"openai invalid_prompt of another kind", 400, `{"error":{"message":"Invalid prompt: the messages are empty.","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}`, 0},
		{"anthropic, translated", 400, string(anthropic.ToOpenAIError([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"},"request_id":"req_1"}`))), FallbackContentFilter},
		{"openai context length", 400, openAIContextLength, FallbackContextLength},
		{"vllm", 400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, FallbackContextLength},
		{"anthropic prompt too long, translated", 400, string(anthropic.ToOpenAIError([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`))), FallbackContextLength},
		{"anthropic context limit, translated", 400, string(anthropic.ToOpenAIError([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"input length and ` + "`max_tokens`" + ` exceed context limit: 188240 + 21333 > 200000, decrease input length or ` + "`max_tokens`" + ` and try again"}}`))), FallbackContextLength},
		{"tgi", 422, `{"error":"Input validation error: ` + "`inputs` tokens + `max_new_tokens` must be <= 4096" + `. Given: 4000 ` + "`inputs`" + ` tokens and 500 ` + "`max_new_tokens`" + `","error_type":"validation"}`, FallbackContextLength},
		{"a bad parameter", 400, openAIBadParam, 0},
		{"not json", 400, `Bad Request`, 0},
		{"a 500 with a filter's code", 500, azureContentFilter, 0},
		{"a 404", 404, openAIContextLength, 0},
	} {
		if got := refusalClass(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseFallbackClass(t *testing.T) {
	var all FallbackClass
	for _, name := range FallbackClassNames() {
		c, ok := ParseFallbackClass(name)
		if !ok || c.String() != name {
			t.Fatalf("%s: %v %v", name, c, ok)
		}
		all |= c
	}
	if all.String() != "content_filter,context_length,rate_limited,server_error" || all.Has(0) || !all.Has(FallbackServerError) {
		t.Fatalf("all: %s", all)
	}
	if _, ok := ParseFallbackClass("timeout"); ok {
		t.Fatal("timeout parsed")
	}
}

// fallbackProviders serve model m from a (eu, cheapest), b (eu) and us
// (us, cheaper than b), and m-large from big (eu).
func fallbackProviders() []Provider {
	a, b, us := offer("a", 0.1, 0.1, "eu"), offer("b", 2, 2, "eu"), offer("us", 1, 1, "us")
	big := offer("big", 3, 3, "eu")
	big.Models[0].Name = "m-large"
	return []Provider{a, b, us, big}
}

// fallbackCatalog is fallbackProviders' catalog with the group g.
func fallbackCatalog(t *testing.T, g Group) *Catalog {
	cat, err := NewCatalog(fallbackProviders(), g)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestPlannerContextFallback(t *testing.T) {
	g := Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackContextLength, ContextFallback: []string{"m-large"}}
	pl := &Planner{Region: "r1", Catalog: fallbackCatalog(t, g), Health: NewTracker(DefaultHealthConfig(), TrackerHooks{})}
	req := chatReq(t, `{"model":"g","messages":[{"role":"user","content":"hi"}]}`)
	req.Residency = region.Residency{Jurisdiction: "eu"}
	plan, err := pl.Plan(req, time.Unix(0, 0))
	if err != nil || !equal(order(plan), []string{"a", "b", "big"}) || plan.FallbackOn != FallbackContextLength {
		t.Fatalf("%v %v", order(plan), err)
	}
	if plan.Targets[1].ContextFallback || !plan.Targets[2].ContextFallback || !strings.Contains(strings.Join(plan.Why(2), "; "), "larger-context") {
		t.Fatalf("context fallback marks: %+v; why %v", plan.Targets, plan.Why(2))
	}
	// Without context_length among the classes, the larger models are
	// not planned at all; and a catalog refuses them named so.
	g.FallbackOn = FallbackContentFilter
	if _, err := NewCatalog(fallbackProviders(), g); err == nil ||
		!strings.Contains(err.Error(), "needs context_length") {
		t.Fatalf("context_fallback without context_length: %v", err)
	}
	g.ContextFallback = nil
	pl.Catalog = fallbackCatalog(t, g)
	if plan, _ := pl.Plan(req, time.Unix(0, 0)); !equal(order(plan), []string{"a", "b"}) {
		t.Fatalf("without context_length: %v", order(plan))
	}
	bad := Group{Name: "y", Members: []string{"m"}, FallbackOn: FallbackContextLength, ContextFallback: []string{"nope"}}
	if _, err := NewCatalog(fallbackProviders(), bad); err == nil {
		t.Fatal("an unserved context_fallback model accepted")
	}
}

// scriptedProviders answers each provider's calls as a script says, and
// counts them: "ok", or a status and body.
type scriptedProviders struct {
	mu     sync.Mutex
	answer map[string]func() (int, string) // by host
	calls  map[string]int
}

func (s *scriptedProviders) RoundTrip(r *http.Request) (*http.Response, error) {
	host := strings.TrimSuffix(r.URL.Host, ".test")
	s.mu.Lock()
	s.calls[host]++
	f := s.answer[host]
	s.mu.Unlock()
	status, body := http.StatusOK, string(propChatOK)
	if f != nil {
		status, body = f()
	}
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

func refuse(status int, body string) func() (int, string) {
	return func() (int, string) { return status, body }
}

// runFallback executes a request for the group g over fallbackCatalog's
// providers with a residency of eu, the providers answering as script
// says.
func runFallback(t *testing.T, g Group, script map[string]func() (int, string)) (*Result, error, *httptest.ResponseRecorder, map[string]int) {
	t.Helper()
	sp := &scriptedProviders{answer: script, calls: map[string]int{}}
	ex, pl := euRoute(fallbackCatalog(t, g), sp)
	res, err, rec := executeEU(t, ex, pl, "g")
	return res, err, rec, sp.calls
}

// euRoute returns an executor that calls providers through rt and a
// planner over cat, both at a node of region r1, in the eu.
func euRoute(cat *Catalog, rt http.RoundTripper) (*Executor, *Planner) {
	regions, _ := region.NewMap([]region.Region{{Name: "r1", Jurisdiction: "eu"}})
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	ex := NewExecutor(DefaultExecutorConfig(), ExecutorDeps{Guard: Guard{Region: "r1", Regions: regions}, Tracker: tr,
		Tokenizer: &Tokenizer{}, Transport: rt})
	return ex, &Planner{Region: "r1", Catalog: cat, Health: tr}
}

// executeEU plans and executes a chat request for model with a residency
// of eu, into a recorder.
func executeEU(t *testing.T, ex *Executor, pl *Planner, model string) (*Result, error, *httptest.ResponseRecorder) {
	t.Helper()
	req := chatReq(t, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`)
	req.Residency = region.Residency{Jurisdiction: "eu"}
	plan, err := pl.Plan(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	res, err := ex.Execute(context.Background(), req, plan, recorderSink{rec})
	return res, err, rec
}

type recorderSink struct{ *httptest.ResponseRecorder }

func (s recorderSink) Flush() error { return nil }

func TestExecutorFallsBackByClass(t *testing.T) {
	cf := refuse(400, azureContentFilter)
	t.Run("content filter moves to the next compliant target", func(t *testing.T) {
		res, err, rec, calls := runFallback(t, Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackContentFilter},
			map[string]func() (int, string){"a": cf})
		if err != nil || res.Provider != "b" || calls["us"] != 0 || calls["a"] != 1 {
			t.Fatalf("%v: served by %s, calls %v", err, res.Provider, calls)
		}
		if len(res.Fallbacks) != 1 || res.Fallbacks[0] != (Fallback{FallbackContentFilter, "a"}) ||
			!strings.Contains(rec.Header().Get("X-Llmesh-Route"), "; fallback: content_filter from a") {
			t.Fatalf("fallbacks %v, route %q", res.Fallbacks, rec.Header().Get("X-Llmesh-Route"))
		}
	})
	t.Run("without the option the refusal is the answer", func(t *testing.T) {
		res, err, _, calls := runFallback(t, Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackContextLength},
			map[string]func() (int, string){"a": cf})
		var reply *UpstreamReply
		if !errors.As(err, &reply) || reply.Status != 400 || string(reply.Body) != azureContentFilter || calls["b"] != 0 || len(res.Fallbacks) != 0 {
			t.Fatalf("%v, calls %v", err, calls)
		}
	})
	t.Run("no compliant target left: the first refusal as it was", func(t *testing.T) {
		_, err, _, calls := runFallback(t, Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackContentFilter | FallbackServerError},
			map[string]func() (int, string){"a": cf, "b": refuse(400, strings.Replace(azureContentFilter, "medium", "high", 1))})
		var reply *UpstreamReply
		if !errors.As(err, &reply) || reply.Provider != "a" || string(reply.Body) != azureContentFilter || calls["us"] != 0 || calls["b"] != 1 {
			t.Fatalf("%v, calls %v", err, calls)
		}
	})
	t.Run("context length moves to the larger model, past the same model elsewhere", func(t *testing.T) {
		res, err, rec, calls := runFallback(t, Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackContextLength, ContextFallback: []string{"m-large"}},
			map[string]func() (int, string){"a": refuse(400, openAIContextLength)})
		if err != nil || res.Provider != "big" || calls["b"] != 0 || calls["us"] != 0 {
			t.Fatalf("%v: served by %s, calls %v", err, res.Provider, calls)
		}
		if res.Target.Offer.Model.Name != "m-large" || !strings.Contains(rec.Header().Get("X-Llmesh-Route"), "fallback: context_length from a") {
			t.Fatalf("answered by %s, route %q", res.Target.Offer.Model.Name, rec.Header().Get("X-Llmesh-Route"))
		}
	})
	t.Run("the larger model is not tried for another failure", func(t *testing.T) {
		res, err, _, calls := runFallback(t, Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackContextLength | FallbackServerError, ContextFallback: []string{"m-large"}},
			map[string]func() (int, string){"a": refuse(500, string(propChatErr)), "b": refuse(503, string(propChatErr))})
		if err == nil || calls["big"] != 0 || len(res.Fallbacks) != 2 || res.Fallbacks[1] != (Fallback{FallbackServerError, "b"}) {
			t.Fatalf("%v, calls %v, fallbacks %v", err, calls, res.Fallbacks)
		}
	})
	t.Run("a 429 listed is named", func(t *testing.T) {
		res, err, rec, _ := runFallback(t, Group{Name: "g", Members: []string{"m"}, FallbackOn: FallbackRateLimited},
			map[string]func() (int, string){"a": refuse(429, string(propChatErr))})
		if err != nil || res.Provider != "b" || !strings.HasSuffix(rec.Header().Get("X-Llmesh-Route"), "; fallback: rate_limited from a") {
			t.Fatalf("%v, route %q", err, rec.Header().Get("X-Llmesh-Route"))
		}
	})
}
