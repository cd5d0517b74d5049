package emulator

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// legacyRequest is a CreateCompletionRequest as far as the emulator reads
// it.
type legacyRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Stop json.RawMessage `json:"stop"`
	Echo bool            `json:"echo"`
}

// legacy is the answer to one legacy completion request.
type legacy struct {
	id           string
	model        string
	created      int64
	prompt       int          // prompt tokens
	blocks       promptBlocks // the prompts', when an engine serves them
	choices      []generated  // n per prompt, prompt by prompt
	echo         []string     // per choice, the prompt echoed before it; nil without echo
	finish       string       // when no stop sequence ended a choice
	includeUsage bool
}

// legacyCompletion answers POST /v1/completions and its Azure path: n
// choices per prompt of the chat generator's words, paced as chat is.
func (x *exchange) legacyCompletion(body []byte) {
	if !x.admit() {
		return
	}
	var req legacyRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		x.fail(aerr)
		return
	}
	lc, aerr := x.readLegacy(&req)
	if aerr != nil {
		x.fail(aerr)
		return
	}
	if !x.served(lc.model) || x.unlucky() || !x.startEngine(lc.prompt, lc.blocks, nil, lc.longest()) {
		return
	}
	if req.Stream {
		x.streamLegacy(lc)
	} else {
		x.respondLegacy(lc)
	}
}

// readLegacy validates req and generates its answer.
func (x *exchange) readLegacy(req *legacyRequest) (*legacy, *apiError) {
	cfg := x.cfg
	lc := &legacy{model: x.model(req.Model), created: time.Now().Unix(), finish: "stop"}
	if lc.model == "" {
		return nil, invalidParam("model", "Missing required parameter: 'model'.")
	}
	prompts, aerr := readPrompts(req.Prompt, "prompt")
	if aerr != nil {
		return nil, aerr
	}
	stops, aerr := readStops(req.Stop, "stop", 4)
	if aerr != nil {
		return nil, aerr
	}
	tokens, n := cfg.DefaultMaxTokens, 1
	if req.MaxTokens != nil {
		if tokens, lc.finish = *req.MaxTokens, "length"; tokens < 0 || tokens > maxCompletionTokens {
			return nil, invalidParam("max_tokens", "max_tokens must be between 0 and "+strconv.Itoa(maxCompletionTokens)+", got "+strconv.Itoa(tokens)+".")
		}
	}
	if req.N != nil {
		if n = *req.N; n < 1 || n > 128 {
			return nil, invalidParam("n", "n must be between 1 and 128, got "+strconv.Itoa(n)+".")
		}
	}
	if len(prompts)*n*max(tokens, 1) > 4*maxCompletionTokens {
		return nil, invalidParam("n", "The request asks for more than "+strconv.Itoa(4*maxCompletionTokens)+" completion tokens in all.")
	}
	lc.includeUsage = req.Stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	lc.prompt, lc.blocks = x.inputsOf(prompts)
	lc.id = string(appendID(nil, "cmpl-", draw(cfg.Seed, x.seq, saltID)^fnv(cfg.Name), 29))
	key := draw(cfg.Seed, x.seq, saltText)
	for p := range prompts {
		for range n {
			lc.choices = append(lc.choices, generate(key, len(lc.choices), tokens, stops))
			if req.Echo {
				lc.echo = append(lc.echo, prompts[p].text)
			}
		}
	}
	return lc, nil
}

// readStops decodes a stop member: null, a string or an array of at most
// most strings.
func readStops(raw json.RawMessage, param string, most int) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var stops []string
	if json.Unmarshal(raw, &stops) != nil {
		return nil, invalidParam(param, "'"+param+"' must be a string or an array of strings.")
	}
	if len(stops) > most {
		return nil, invalidParam(param, "'"+param+"' may hold at most "+strconv.Itoa(most)+" sequences.")
	}
	return stops, nil
}

// completionTokens is the tokens of every choice.
func (lc *legacy) completionTokens() int {
	n := 0
	for i := range lc.choices {
		n += lc.choices[i].tokens
	}
	return n
}

// longest is the tokens of the longest choice, which an engine
// generates as one sequence.
func (lc *legacy) longest() int {
	n := 0
	for i := range lc.choices {
		n = max(n, lc.choices[i].tokens)
	}
	return n
}

// finishOf is the finish_reason of choice i.
func (lc *legacy) finishOf(i int) string {
	if lc.choices[i].stop != "" {
		return "stop"
	}
	return lc.finish
}

func (x *exchange) respondLegacy(lc *legacy) {
	out := lc.completionTokens()
	delivered := 0
	defer func() { x.e.rec.charge(lc.prompt, delivered, x.cfg.cost(lc.model, lc.prompt, delivered)) }()
	if !x.awaitAll(x.whole(lc.longest())) {
		return
	}
	bp := x.e.buffer()
	defer x.e.release(bp)
	b := lc.appendHead((*bp)[:0])
	for i := range lc.choices {
		if i > 0 {
			b = append(b, ',')
		}
		text := lc.choices[i].text()
		if lc.echo != nil {
			text = lc.echo[i] + text
		}
		b = lc.appendChoice(b, i, text, lc.finishOf(i))
	}
	b = lc.appendTail(b, `,"usage":`)
	b = appendUsage(b, lc.prompt, out, x.cached())
	*bp = append(b, '}')
	x.answerOK(*bp)
	delivered = out
}

// appendHead appends a text_completion object up to the opening of its
// choices.
func (lc *legacy) appendHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, lc.id)
	b = append(b, `,"object":"text_completion","created":`...)
	b = strconv.AppendInt(b, lc.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, lc.model)
	return append(b, `,"system_fingerprint":"`+systemFingerprint+`","choices":[`...)
}

// appendTail closes the choices and appends more, the usage member's
// opening or "".
func (lc *legacy) appendTail(b []byte, more string) []byte {
	return append(append(b, ']'), more...)
}

// appendChoice appends one choice; finish "" is null.
func (lc *legacy) appendChoice(b []byte, i int, text, finish string) []byte {
	b = append(b, `{"text":`...)
	b = appendString(b, text)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = appendNullableString(b, finish)
	return append(b, '}')
}

// streamLegacy sends the completion as text_completion chunks, one per
// token per choice, then a finish chunk per choice, the usage chunk if
// asked for, and data: [DONE].
func (x *exchange) streamLegacy(lc *legacy) {
	delivered := 0
	defer func() { x.e.rec.charge(lc.prompt, delivered, x.cfg.cost(lc.model, lc.prompt, delivered)) }()
	s, ok := x.startSSE()
	if !ok {
		return
	}
	bp := x.e.buffer()
	defer x.e.release(bp)
	steps := 0
	for i := range lc.choices {
		steps = max(steps, len(lc.choices[i].pieces))
	}
	cutAfter, sent := x.cutAfter(steps*len(lc.choices)), 0
	chunk := func(i int, text, finish string) bool {
		b := append((*bp)[:0], "data: "...)
		b = lc.appendChoice(lc.appendHead(b), i, text, finish)
		*bp = lc.appendTail(b, "}\n\n")
		return s.send(*bp)
	}
	for step := range steps {
		if !s.token(step) {
			return
		}
		for i := range lc.choices {
			g := &lc.choices[i]
			if step >= len(g.pieces) {
				continue
			}
			text := g.pieces[step]
			if step == 0 && lc.echo != nil {
				text = lc.echo[i] + text
			}
			if !chunk(i, text, "") {
				return
			}
			delivered++
			if sent++; sent == cutAfter {
				panic(http.ErrAbortHandler) // no finish chunk, no [DONE]
			}
		}
	}
	if !x.awaitDone() {
		return
	}
	for i := range lc.choices {
		if !chunk(i, "", lc.finishOf(i)) {
			return
		}
		delivered += lc.choices[i].tokens - len(lc.choices[i].pieces)
	}
	if lc.includeUsage {
		b := lc.appendTail(lc.appendHead(append((*bp)[:0], "data: "...)), `,"usage":`)
		b = appendUsage(b, lc.prompt, lc.completionTokens(), x.cached())
		if *bp = append(b, "}\n\n"...); !s.send(*bp) {
			return
		}
	}
	if s.send([]byte("data: [DONE]\n\n")) {
		x.e.rec.streamCompleted()
	}
}
