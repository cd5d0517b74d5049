package route

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// Probe sends the smallest real request there is — one user word,
// max_tokens 1 — to the provider of o, through the same path as any
// attempt: the tracker admits it (an ejected provider whose backoff has
// ended gets its probe slot), the rate limiter counts it, and its outcome
// feeds the health the mesh gossips. It is a deep health check that costs
// a few tokens. The answer is discarded; the Result says what it cost.
func (e *Executor) Probe(ctx context.Context, o *Offer) (*Result, error) {
	body := `{"model":` + strconv.Quote(o.Model.Name) + `,"messages":[{"role":"user","content":"ping"}],"max_tokens":1}`
	chat, err := ParseChatRequest([]byte(body))
	if err != nil {
		return nil, fmt.Errorf("probe request for %s: %w", o.Provider.Name, err)
	}
	req := &Request{Chat: chat}
	prompt, upper := chat.PromptEstimate()
	plan := &Plan{Policy: "probe", PromptTokens: prompt, PromptUpper: upper, OutputTokens: 1, Targets: []Target{{
		Offer:   o,
		Cost:    o.Model.Cost(Usage{PromptTokens: prompt, CompletionTokens: 1}),
		MaxCost: o.Model.Cost(Usage{PromptTokens: upper, CompletionTokens: 1}),
		Tokens:  prompt + 1,
	}}}
	return e.Execute(ctx, req, plan, &discardSink{header: http.Header{}})
}

// discardSink is a ResponseSink that keeps nothing.
type discardSink struct {
	header http.Header
}

func (d *discardSink) Header() http.Header         { return d.header }
func (d *discardSink) WriteHeader(int)             {}
func (d *discardSink) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardSink) Flush() error                { return nil }
