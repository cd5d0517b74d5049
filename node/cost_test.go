package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// rawBodies records what a client read of each answer, for the SSE
// comment no SDK surfaces.
type rawBodies struct {
	mu   sync.Mutex
	last *bytes.Buffer
}

func (r *rawBodies) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	resp, err := next(req)
	if err != nil {
		return resp, err
	}
	buf := new(bytes.Buffer)
	r.mu.Lock()
	r.last = buf
	r.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, buf), resp.Body}
	return resp, nil
}

func (r *rawBodies) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last.String()
}

var costCommentRe = regexp.MustCompile(`(?m)^: X-LLMesh-Cost: ([0-9.]+)\n\n`)

// streamCost is the cost a stream's comment gives, checked to come
// before data: [DONE] (or, without one, after the last event).
func streamCost(t *testing.T, raw string) string {
	t.Helper()
	m := costCommentRe.FindStringSubmatchIndex(raw)
	if m == nil {
		t.Fatalf("no cost comment in the stream:\n%s", raw)
	}
	if done := strings.Index(raw, "data: [DONE]"); done >= 0 && done < m[0] || done < 0 && strings.TrimSpace(raw[m[1]:]) != "" {
		t.Fatalf("the cost comment is not the stream's last event before [DONE]:\n%s", raw)
	}
	return raw[m[2]:m[3]]
}

func nanos(t *testing.T, usd string) int64 {
	t.Helper()
	if !regexp.MustCompile(`^[0-9]+(\.[0-9]{1,9})?$`).MatchString(usd) {
		t.Fatalf("cost %q is not decimal USD with at most 9 fractional digits", usd)
	}
	f, _ := strconv.ParseFloat(usd, 64)
	return int64(math.Round(f * 1e9))
}

// usageCost is usage.cost in a raw usage object, "" without one.
func usageCost(t *testing.T, rawUsage string) string {
	t.Helper()
	var u struct {
		Cost json.Number `json:"cost"`
	}
	if err := json.Unmarshal([]byte(rawUsage), &u); err != nil {
		t.Fatalf("usage %s: %v", rawUsage, err)
	}
	return u.Cost.String()
}

// costProbe sends requests to one node as the eu tenant, through the
// official SDKs, and checks what each answer said it cost against what
// the providers charged for it.
type costProbe struct {
	t    *testing.T
	f    *regionsFixture
	url  string
	raw  *rawBodies
	oc   openai.Client
	ac   anthropic.Client
	hdr  *http.Response // the last answer's
	from float64        // what the providers had charged before it
}

func newCostProbe(t *testing.T, f *regionsFixture, url string) *costProbe {
	p := &costProbe{t: t, f: f, url: url, raw: &rawBodies{}}
	p.oc = openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(euKey), option.WithMaxRetries(0),
		option.WithMiddleware(p.raw.middleware))
	p.ac = anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey(euKey), aoption.WithMaxRetries(0),
		aoption.WithMiddleware(p.raw.middleware))
	return p
}

func (p *costProbe) charged() float64 {
	var sum float64
	for _, e := range p.f.emus {
		sum += e.Stats().ChargedUSD
	}
	return sum
}

// begin notes what was charged before the next request.
func (p *costProbe) begin() { p.from = p.charged() }

// expect checks that the answer just read, which said it cost cost,
// cost what the providers charged for it, to the nano-dollar.
func (p *costProbe) expect(what, cost string) {
	t := p.t
	t.Helper()
	if via := p.hdr.Header.Get("X-LLMesh-Via"); via != "eu-1" || p.hdr.Header.Get("X-LLMesh-Provider") != "gpu-eu" {
		t.Fatalf("%s: served via %q by %q", what, via, p.hdr.Header.Get("X-LLMesh-Provider"))
	}
	want := nanos(t, cost)
	var got int64
	wait.For(t, 5*time.Second, what+": the provider's charge", func() bool {
		got = int64(math.Round((p.charged() - p.from) * 1e9))
		return got >= want
	})
	if got != want || want == 0 {
		t.Fatalf("%s: X-LLMesh-Cost %s (%d nano-dollars), the provider charged %d", what, cost, want, got)
	}
}

// expectWhole checks a whole answer: its header's cost is what the
// providers charged, and its usage (rawUsage) says the same.
func (p *costProbe) expectWhole(what, rawUsage string) {
	p.t.Helper()
	cost := p.hdr.Header.Get("X-LLMesh-Cost")
	p.expect(what, cost)
	if c := usageCost(p.t, rawUsage); c != cost {
		p.t.Fatalf("%s: usage.cost %q, X-LLMesh-Cost %q", what, c, cost)
	}
}

var (
	costMsgs  = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What does it cost?")}
	withUsage = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
)

// chat: the header and usage.cost on a whole answer; the comment, and
// usage.cost in the usage chunk asked for, on a stream.
func (p *costProbe) chat() {
	t, ctx := p.t, context.Background()
	p.begin()
	chat, err := p.oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: costMsgs, MaxTokens: openai.Int(9)},
		option.WithResponseInto(&p.hdr))
	if err != nil {
		t.Fatal(err)
	}
	p.expectWhole("chat", chat.Usage.RawJSON())
	p.begin()
	cs := p.oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: costMsgs, MaxTokens: openai.Int(9),
		StreamOptions: withUsage}, option.WithResponseInto(&p.hdr))
	var acc openai.ChatCompletionAccumulator
	var chunkCost string
	for cs.Next() {
		acc.AddChunk(cs.Current())
		if u := cs.Current().Usage.RawJSON(); u != "" && u != "null" {
			chunkCost = usageCost(t, u)
		}
	}
	if err := cs.Err(); err != nil || acc.Usage.CompletionTokens != 9 {
		t.Fatalf("chat stream: %v, usage %+v", err, acc.Usage)
	}
	cost := streamCost(t, p.raw.String())
	p.expect("chat stream", cost)
	if chunkCost != cost || p.hdr.Header.Get("X-LLMesh-Cost") != "" {
		t.Fatalf("chat stream: usage.cost %q, comment %q, header %q", chunkCost, cost, p.hdr.Header.Get("X-LLMesh-Cost"))
	}
}

// completions: legacy completions, whole and streamed with usage.
func (p *costProbe) completions() {
	t, ctx := p.t, context.Background()
	params := openai.CompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(7), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}}
	p.begin()
	comp, err := p.oc.Completions.New(ctx, params, option.WithResponseInto(&p.hdr))
	if err != nil {
		t.Fatal(err)
	}
	p.expectWhole("completions", comp.Usage.RawJSON())
	p.begin()
	params.StreamOptions = withUsage
	ls := p.oc.Completions.NewStreaming(ctx, params, option.WithResponseInto(&p.hdr))
	chunkCost := ""
	for ls.Next() {
		if u := ls.Current().Usage.RawJSON(); u != "" && u != "null" {
			chunkCost = usageCost(t, u)
		}
	}
	if err := ls.Err(); err != nil {
		t.Fatal(err)
	}
	cost := streamCost(t, p.raw.String())
	p.expect("completions stream", cost)
	if chunkCost != cost {
		t.Fatalf("completions stream: usage.cost %q, comment %q", chunkCost, cost)
	}
}

// responses: the Responses API, whole (usage.cost too) and streamed (the
// comment after its terminal event).
func (p *costProbe) responses() {
	t, ctx := p.t, context.Background()
	rp := responses.ResponseNewParams{Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(16),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Price?")}}
	p.begin()
	r, err := p.oc.Responses.New(ctx, rp, option.WithResponseInto(&p.hdr))
	if err != nil {
		t.Fatal(err)
	}
	p.expectWhole("responses", r.Usage.RawJSON())
	p.begin()
	rs := p.oc.Responses.NewStreaming(ctx, rp, option.WithResponseInto(&p.hdr))
	completed := false
	for rs.Next() {
		completed = completed || rs.Current().Type == "response.completed"
	}
	if err := rs.Err(); err != nil || !completed {
		t.Fatalf("responses stream: %v, completed %v", err, completed)
	}
	p.expect("responses stream", streamCost(t, p.raw.String()))
}

// messages: Anthropic's Messages API, whole and streamed, through
// anthropic-sdk-go.
func (p *costProbe) messages() {
	t, ctx := p.t, context.Background()
	for _, stream := range []bool{false, true} {
		p.begin()
		params := anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Combien?"))}}
		var m anthropic.Message
		var cost string
		if !stream {
			got, err := p.ac.Messages.New(ctx, params, aoption.WithResponseInto(&p.hdr))
			if err != nil {
				t.Fatal(err)
			}
			m, cost = *got, p.hdr.Header.Get("X-LLMesh-Cost")
		} else {
			st := p.ac.Messages.NewStreaming(ctx, params, aoption.WithResponseInto(&p.hdr))
			for st.Next() {
				if err := m.Accumulate(st.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			cost = streamCost(t, p.raw.String())
		}
		if m.Usage.OutputTokens != 8 || m.StopReason != anthropic.StopReasonMaxTokens {
			t.Fatalf("messages (stream %v): %s", stream, m.RawJSON())
		}
		p.expect("messages stream="+strconv.FormatBool(stream), cost)
	}
}

// trailers: a client that takes trailers gets a stream's cost there too.
func (p *costProbe) trailers() {
	t := p.t
	p.begin()
	req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"trailer"}]}`))
	req.Header.Set("Authorization", "Bearer "+euKey)
	req.Header.Set("TE", "trailers")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.hdr = resp
	cost := streamCost(t, string(body))
	p.expect("stream with trailers", cost)
	if tr := resp.Trailer.Get("X-LLMesh-Cost"); tr != cost {
		t.Fatalf("trailer %q, comment %q", tr, cost)
	}
}

// X-LLMesh-Cost is what the provider charged, to the nano-dollar, on
// every endpoint, whole (a header) and streamed (a final SSE comment,
// which the official SDKs ignore, and an HTTP trailer when the client
// takes trailers), served by the node called and through a forward; the
// usage a client asks for carries it as usage.cost.
func TestCostOnEveryAnswer(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	for _, entry := range []string{"eu", "us"} { // gpu-eu called by eu-1; from us-1 through eu-1
		t.Run(entry, func(t *testing.T) {
			p := newCostProbe(t, f, f.urls[entry])
			p.chat()
			p.completions()
			p.responses()
			p.messages()
			p.trailers()
		})
	}
}
