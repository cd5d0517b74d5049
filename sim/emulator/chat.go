package emulator

import (
	"strconv"
	"time"

	"github.com/llmesh/llmesh/route"
)

// chat answers a chat completion request, from the rate limit on: the
// path, method, key and api-version have been checked.
func (x *exchange) chat(body []byte, dep string, azure bool) {
	cfg := x.cfg
	if !x.admit() {
		return
	}
	req, aerr := parseChat(body, azure, dep)
	if aerr != nil {
		x.fail(aerr)
		return
	}
	model := x.model(req.Model)
	if !x.served(model) {
		return
	}
	if req.MaxTokens > maxCompletionTokens {
		x.fail(invalidParam("max_tokens", "max_tokens is too large: "+strconv.Itoa(req.MaxTokens)+". This model supports at most "+strconv.Itoa(maxCompletionTokens)+" completion tokens."))
		return
	}
	a, aerr := x.analyse(body, req)
	if aerr != nil {
		x.fail(aerr)
		return
	}
	if x.unlucky() {
		return
	}

	c := &completion{
		model:        model,
		created:      time.Now().Unix(),
		azure:        azure,
		n:            req.N,
		includeUsage: req.IncludeUsage,
		textKey:      draw(cfg.Seed, x.seq, saltText),
		callKey:      draw(cfg.Seed, x.seq, saltCall),
		prompt:       a.prompt,
		call:         a.call,
	}
	c.id = string(appendID(nil, "chatcmpl-", draw(cfg.Seed, x.seq, saltID)^fnv(cfg.Name), 29))
	switch {
	case c.call != nil:
		c.tokens, c.finish, c.frags = a.callTokens, "tool_calls", a.frags
	case a.answersTool && (req.MaxTokens == 0 || req.MaxTokens >= cfg.DefaultMaxTokens):
		// The loop's last turn ends by itself, as a Messages answer does.
		c.tokens, c.finish = cfg.DefaultMaxTokens, "stop"
	case req.MaxTokens > 0:
		c.tokens, c.finish = req.MaxTokens, "length"
	default:
		c.tokens, c.finish = cfg.DefaultMaxTokens, "stop"
	}
	var out []int
	if c.call == nil {
		out = x.answerIDs(c.textKey, c.tokens)
	}
	if !x.startEngine(c.prompt, a.blocks, out, c.tokens) {
		return
	}
	if req.Stream {
		x.stream(c)
	} else {
		x.respond(c)
	}
}

// analyse reads the tools of a body and counts its prompt: the messages
// with CountMessages, plus the tools array as sent. It answers with a call
// only when the last message is not a tool result, so that a tool loop
// ends after one call. Bodies seen recently are not analysed again.
func (x *exchange) analyse(body []byte, req *route.ChatRequest) (analysis, *apiError) {
	key, a, ok := x.e.bodies.get(body)
	if ok && (x.eng == nil || a.blocks.block == x.eng.block()) {
		return a, nil
	}
	t, aerr := readTools(body)
	if aerr != nil {
		return a, aerr
	}
	tok := x.e.tok
	a.prompt, a.blocks = x.promptOf(string(t.raw), req.Messages)
	// A tool's result ends the loop: the model answers it in text.
	if a.call = t.call; len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool" {
		a.call, a.answersTool = nil, true
	}
	if a.call != nil {
		a.callTokens = tok.Count(a.call.args)
		a.frags = fragments(a.call.args, a.callTokens)
	}
	x.e.bodies.put(key, a)
	return a, nil
}

// completion is the answer to one chat completion request.
type completion struct {
	id           string
	model        string // as reported: the request's, or the deployment's
	created      int64
	azure        bool // add Azure's content filter results
	n            int  // choices
	tokens       int  // completion tokens per choice
	finish       string
	prompt       int // prompt tokens
	cached       int // of those, found in the engine's prefix cache
	includeUsage bool
	textKey      uint64 // selects the words
	callKey      uint64 // selects the tool call ids
	call         *toolCall
	frags        []string // the call's arguments as streamed
}

// steps is the chunks a stream sends per choice before its finish chunk:
// one per token, or the call's header and one per argument fragment.
func (c *completion) steps() int {
	if c.call != nil {
		return 1 + len(c.frags)
	}
	return c.tokens
}

// stepTokens is the completion tokens chunk step delivers.
func (c *completion) stepTokens(step int) int {
	switch {
	case c.call == nil:
		return 1
	case step == 0:
		return 0
	case step == len(c.frags):
		return c.tokens - (len(c.frags) - 1) // the last fragment carries the rest
	}
	return 1
}

// token is the index of the token chunk step waits for: a call's header
// goes with its first fragment.
func (c *completion) token(step int) int {
	if c.call != nil {
		return max(0, step-1)
	}
	return step
}

// offset is when chunk step is due after the headers: TTFT for the first
// token, then one token every 1/TPS. A call's header goes with its first
// fragment.
func (c *completion) offset(cfg *Config, step int) time.Duration {
	if c.call != nil {
		step = max(0, step-1)
	}
	return cfg.TTFT + tokenTime(cfg, step)
}

// tokenTime is how long generating k tokens after the first takes.
func tokenTime(cfg *Config, k int) time.Duration {
	if cfg.TPS == 0 || k <= 0 {
		return 0
	}
	return time.Duration(float64(k) * float64(time.Second) / cfg.TPS)
}

// fragments splits s into at most n pieces of about equal length, at rune
// boundaries: a call's arguments streamed about a token a chunk.
func fragments(s string, n int) []string {
	starts := make([]int, 0, len(s)+1)
	for i := range s {
		starts = append(starts, i)
	}
	runes := len(starts)
	starts = append(starts, len(s))
	n = max(1, min(n, runes))
	out := make([]string, n)
	for k := range n {
		out[k] = s[starts[k*runes/n]:starts[(k+1)*runes/n]]
	}
	return out
}

// fnv is FNV-1a of s.
func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}
