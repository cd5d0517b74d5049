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

// X-LLMesh-Cost is what the provider charged, to the nano-dollar, on
// every endpoint, whole (a header) and streamed (a final SSE comment,
// which the official SDKs ignore, and an HTTP trailer when the client
// takes trailers), served by the node called and through a forward; the
// usage a client asks for carries it as usage.cost.
func TestCostOnEveryAnswer(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	charged := func() float64 {
		var sum float64
		for _, e := range f.emus {
			sum += e.Stats().ChargedUSD
		}
		return sum
	}
	for _, entry := range []string{"eu", "us"} { // gpu-eu called by eu-1; from us-1 through eu-1
		t.Run(entry, func(t *testing.T) {
			raw := &rawBodies{}
			oc := openai.NewClient(option.WithBaseURL(f.urls[entry]+"/v1/"), option.WithAPIKey(euKey), option.WithMaxRetries(0),
				option.WithMiddleware(raw.middleware))
			ac := anthropic.NewClient(aoption.WithBaseURL(f.urls[entry]), aoption.WithAPIKey(euKey), aoption.WithMaxRetries(0),
				aoption.WithMiddleware(raw.middleware))
			ctx := context.Background()
			var hdr *http.Response
			// expect checks that the answer just read cost what the
			// providers charged for it.
			expect := func(what, cost string, before float64) {
				t.Helper()
				if via := hdr.Header.Get("X-LLMesh-Via"); via != "eu-1" || hdr.Header.Get("X-LLMesh-Provider") != "gpu-eu" {
					t.Fatalf("%s: served via %q by %q", what, via, hdr.Header.Get("X-LLMesh-Provider"))
				}
				want := nanos(t, cost)
				var got int64
				wait.For(t, 5*time.Second, what+": the provider's charge", func() bool {
					got = int64(math.Round((charged() - before) * 1e9))
					return got >= want
				})
				if got != want || want == 0 {
					t.Fatalf("%s: X-LLMesh-Cost %s (%d nano-dollars), the provider charged %d", what, cost, want, got)
				}
			}
			msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What does it cost?")}
			withUsage := openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}

			before := charged()
			chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, MaxTokens: openai.Int(9)},
				option.WithResponseInto(&hdr))
			if err != nil {
				t.Fatal(err)
			}
			cost := hdr.Header.Get("X-LLMesh-Cost")
			expect("chat", cost, before)
			if c := usageCost(t, chat.Usage.RawJSON()); c != cost {
				t.Fatalf("chat: usage.cost %q, X-LLMesh-Cost %q", c, cost)
			}

			before = charged()
			cs := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, MaxTokens: openai.Int(9),
				StreamOptions: withUsage}, option.WithResponseInto(&hdr))
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
			cost = streamCost(t, raw.String())
			expect("chat stream", cost, before)
			if chunkCost != cost || hdr.Header.Get("X-LLMesh-Cost") != "" {
				t.Fatalf("chat stream: usage.cost %q, comment %q, header %q", chunkCost, cost, hdr.Header.Get("X-LLMesh-Cost"))
			}

			before = charged()
			comp, err := oc.Completions.New(ctx, openai.CompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(7),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}}, option.WithResponseInto(&hdr))
			if err != nil {
				t.Fatal(err)
			}
			cost = hdr.Header.Get("X-LLMesh-Cost")
			expect("completions", cost, before)
			if c := usageCost(t, comp.Usage.RawJSON()); c != cost {
				t.Fatalf("completions: usage.cost %q, X-LLMesh-Cost %q", c, cost)
			}
			before = charged()
			ls := oc.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(7),
				Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")},
				StreamOptions: withUsage}, option.WithResponseInto(&hdr))
			chunkCost = ""
			for ls.Next() {
				if u := ls.Current().Usage.RawJSON(); u != "" && u != "null" {
					chunkCost = usageCost(t, u)
				}
			}
			if err := ls.Err(); err != nil {
				t.Fatal(err)
			}
			cost = streamCost(t, raw.String())
			expect("completions stream", cost, before)
			if chunkCost != cost {
				t.Fatalf("completions stream: usage.cost %q, comment %q", chunkCost, cost)
			}

			before = charged()
			rp := responses.ResponseNewParams{Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(16),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Price?")}}
			r, err := oc.Responses.New(ctx, rp, option.WithResponseInto(&hdr))
			if err != nil {
				t.Fatal(err)
			}
			cost = hdr.Header.Get("X-LLMesh-Cost")
			expect("responses", cost, before)
			if c := usageCost(t, r.Usage.RawJSON()); c != cost {
				t.Fatalf("responses: usage.cost %q, X-LLMesh-Cost %q", c, cost)
			}
			before = charged()
			rs := oc.Responses.NewStreaming(ctx, rp, option.WithResponseInto(&hdr))
			completed := false
			for rs.Next() {
				completed = completed || rs.Current().Type == "response.completed"
			}
			if err := rs.Err(); err != nil || !completed {
				t.Fatalf("responses stream: %v, completed %v", err, completed)
			}
			expect("responses stream", streamCost(t, raw.String()), before)

			for _, stream := range []bool{false, true} {
				before = charged()
				p := anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 8,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Combien?"))}}
				var m anthropic.Message
				if !stream {
					got, err := ac.Messages.New(ctx, p, aoption.WithResponseInto(&hdr))
					if err != nil {
						t.Fatal(err)
					}
					m, cost = *got, hdr.Header.Get("X-LLMesh-Cost")
				} else {
					st := ac.Messages.NewStreaming(ctx, p, aoption.WithResponseInto(&hdr))
					for st.Next() {
						if err := m.Accumulate(st.Current()); err != nil {
							t.Fatal(err)
						}
					}
					if err := st.Err(); err != nil {
						t.Fatal(err)
					}
					cost = streamCost(t, raw.String())
				}
				if m.Usage.OutputTokens != 8 || m.StopReason != anthropic.StopReasonMaxTokens {
					t.Fatalf("messages (stream %v): %s", stream, m.RawJSON())
				}
				expect("messages stream="+strconv.FormatBool(stream), cost, before)
			}

			// A client that takes trailers gets the stream's cost there too.
			before = charged()
			req, _ := http.NewRequest(http.MethodPost, f.urls[entry]+"/v1/chat/completions",
				strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"trailer"}]}`))
			req.Header.Set("Authorization", "Bearer "+euKey)
			req.Header.Set("TE", "trailers")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			hdr = resp
			cost = streamCost(t, string(body))
			expect("stream with trailers", cost, before)
			if tr := resp.Trailer.Get("X-LLMesh-Cost"); tr != cost {
				t.Fatalf("trailer %q, comment %q", tr, cost)
			}
		})
	}
}
