package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// PrefixConfig is the shared-prefix workload: tenants, each with a long
// system prompt of its own, hold multi-turn conversations, each turn
// sending the whole conversation so far (the previous answers
// included), with no session header and no user field: only the
// prompts say which requests share a prefix. Conversations start open
// loop, at Rate/Turns a second; a conversation's next turn leaves as
// soon as its previous answer has arrived.
type PrefixConfig struct {
	// Tenants is how many distinct system prefixes there are; each
	// conversation draws one at random.
	Tenants int
	// PrefixWords is the length of each tenant's system prefix, in words
	// (about as many tokens).
	PrefixWords int
	// Turns is the requests of each conversation.
	Turns int
	// UserWords is the length of each user message, in words.
	UserWords int
	// MaxTokens is each answer's length.
	MaxTokens int
	// Rate is the requests a second offered: conversations start at
	// Rate/Turns a second.
	Rate float64
	// Duration is how long conversations start, per target; turns
	// begun by then still run.
	Duration time.Duration
	// Drain is how long, after Duration, the turns in flight may still
	// take; those unanswered then are cancelled and counted unfinished.
	Drain time.Duration
	// Model is the model asked for.
	Model string
	// Key is the tenant key sent as a bearer token ("" sends none).
	Key string
	// Seed draws the prefixes, the messages and each conversation's
	// tenant: every target gets the same workload.
	Seed uint64
}

// DefaultPrefixConfig is issue 22's workload: 50 tenants of 4,000-word
// prefixes, conversations of four turns.
func DefaultPrefixConfig() PrefixConfig {
	return PrefixConfig{Tenants: 50, PrefixWords: 4000, Turns: 4, UserWords: 40, MaxTokens: 64,
		Rate: 40, Duration: 20 * time.Second, Drain: 15 * time.Second, Model: "llama-3.1-8b", Seed: 1}
}

// Validate reports the first field out of range.
func (c PrefixConfig) Validate() error {
	switch {
	case c.Tenants < 1:
		return fmt.Errorf("bench: Tenants must be at least 1, got %d", c.Tenants)
	case c.PrefixWords < 1 || c.UserWords < 1:
		return fmt.Errorf("bench: PrefixWords and UserWords must be at least 1, got %d and %d", c.PrefixWords, c.UserWords)
	case c.Turns < 1:
		return fmt.Errorf("bench: Turns must be at least 1, got %d", c.Turns)
	case c.MaxTokens < 1:
		return fmt.Errorf("bench: MaxTokens must be at least 1, got %d", c.MaxTokens)
	case !(c.Rate > 0):
		return fmt.Errorf("bench: Rate must be above 0, got %v", c.Rate)
	case c.Duration <= 0 || c.Drain < 0:
		return fmt.Errorf("bench: Duration must be above 0 and Drain not negative, got %s and %s", c.Duration, c.Drain)
	}
	return nil
}

// PrefixTarget is where a policy's run sends its requests: a node (URL),
// or, for the oracle, the replicas themselves (Replicas, each up to
// /v1), every tenant's conversations to one replica (tenant i to
// replica i mod n).
type PrefixTarget struct {
	Name     string
	URL      string
	Replicas []string
}

// PrefixResult is one target's figures.
type PrefixResult struct {
	Target string `json:"target"`
	// Requests were sent; OK answered whole; Errors failed; Unfinished
	// were cancelled at the end of the drain.
	Requests   int `json:"requests"`
	OK         int `json:"ok"`
	Errors     int `json:"errors"`
	Unfinished int `json:"unfinished"`
	// TTFT is from a request's scheduled start (a conversation's first
	// turn) or its sending (a later turn, sent once the previous answer
	// is in) to its first content token, over the answered requests.
	TTFT50 time.Duration `json:"ttft_p50_ns"`
	TTFT90 time.Duration `json:"ttft_p90_ns"`
	// OutputTPS is the answers' completion tokens over the time from the
	// first conversation's start to the last answer's end.
	OutputTPS float64 `json:"output_tokens_per_s"`
	// PromptTokens and CachedTokens add up the answers' usage
	// (prompt_tokens, prompt_tokens_details.cached_tokens); HitRate is
	// their ratio.
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	FirstError   string  `json:"first_error,omitempty"`
}

// RunPrefix sends the workload to each target in turn and reports each.
func RunPrefix(ctx context.Context, cfg PrefixConfig, targets []PrefixTarget) ([]PrefixResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	defer client.CloseIdleConnections()
	w := newPrefixWorkload(cfg)
	var out []PrefixResult
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, runPrefixTarget(ctx, client, cfg, w, t))
	}
	return out, nil
}

// prefixWorkload is the text every target gets alike.
type prefixWorkload struct {
	prefixes []string // by tenant
	convs    []prefixConv
}

// prefixConv is one conversation: its tenant and its user messages.
type prefixConv struct {
	tenant int
	users  []string
}

// vocabulary is what the prompts are made of: common words, a token
// each to a tokeniser.
var vocabulary = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three`)

func newPrefixWorkload(cfg PrefixConfig) *prefixWorkload {
	r := rand.New(rand.NewPCG(cfg.Seed, 22))
	words := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(vocabulary[r.IntN(len(vocabulary))])
		}
		return b.String()
	}
	w := &prefixWorkload{}
	for i := range cfg.Tenants {
		w.prefixes = append(w.prefixes, fmt.Sprintf("You are the assistant of tenant %d. %s", i, words(cfg.PrefixWords)))
	}
	// Enough conversations for the whole run, a few more for rounding.
	n := int(cfg.Rate/float64(cfg.Turns)*cfg.Duration.Seconds()) + 1
	for range n {
		c := prefixConv{tenant: r.IntN(cfg.Tenants)}
		for range cfg.Turns {
			c.users = append(c.users, words(cfg.UserWords))
		}
		w.convs = append(w.convs, c)
	}
	return w
}

// prefixSample is one request's outcome.
type prefixSample struct {
	ttft                     time.Duration
	prompt, cached, complete int64
	err                      string
	unfinished               bool
	provider                 string // X-LLMesh-Provider, when a node answered
}

func runPrefixTarget(ctx context.Context, client *http.Client, cfg PrefixConfig, w *prefixWorkload, t PrefixTarget) PrefixResult {
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(cfg.Drain))
	defer cancel()
	interval := time.Duration(float64(time.Second) * float64(cfg.Turns) / cfg.Rate)
	var mu sync.Mutex
	var samples []prefixSample
	var wg sync.WaitGroup
	for i, c := range w.convs {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(deadline) {
			break
		}
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			break
		}
		url := t.URL
		if len(t.Replicas) > 0 {
			url = t.Replicas[c.tenant%len(t.Replicas)]
		}
		wg.Go(func() {
			msgs := []chatMessage{{Role: "system", Content: w.prefixes[c.tenant]}}
			sent := at
			for turn, u := range c.users {
				if turn > 0 {
					if time.Now().After(deadline) {
						return
					}
					sent = time.Now()
				}
				msgs = append(msgs, chatMessage{Role: "user", Content: u})
				s, answer := prefixOne(ctx, client, cfg, url, msgs)
				if !s.first.IsZero() {
					s.ttft = s.first.Sub(sent)
				}
				mu.Lock()
				samples = append(samples, s.prefixSample)
				mu.Unlock()
				if s.err != "" || s.unfinished {
					return
				}
				msgs = append(msgs, chatMessage{Role: "assistant", Content: answer})
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	return summarizePrefix(t.Name, samples, elapsed)
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// timedSample is a sample with the instant of its first token, so that
// TTFT can be counted from the schedule rather than the sending.
type timedSample struct {
	prefixSample
	first time.Time
}

// prefixOne sends one streamed turn and reads it whole, returning its
// outcome and the answer's text.
func prefixOne(ctx context.Context, client *http.Client, cfg PrefixConfig, url string, msgs []chatMessage) (timedSample, string) {
	body, _ := json.Marshal(map[string]any{
		"model": cfg.Model, "max_tokens": cfg.MaxTokens, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}, "messages": msgs,
	})
	var s timedSample
	fail := func(err error) (timedSample, string) {
		if ctx.Err() != nil {
			s.unfinished = true
		} else {
			s.err = err.Error()
		}
		return s, ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if cfg.Key != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	s.provider = resp.Header.Get("X-LLMesh-Provider")
	if resp.StatusCode != http.StatusOK {
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		return fail(fmt.Errorf("%d: %s", resp.StatusCode, bytes.TrimSpace(b[:n])))
	}
	var answer strings.Builder
	done, usage := false, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
				Details    *struct {
					Cached int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			return fail(fmt.Errorf("a chunk that is not JSON: %w", err))
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" && s.first.IsZero() {
				s.first = time.Now()
			}
			answer.WriteString(c.Delta.Content)
		}
		if u := chunk.Usage; u != nil {
			usage = true
			s.prompt, s.complete = u.Prompt, u.Completion
			if u.Details != nil {
				s.cached = u.Details.Cached
			}
		}
	}
	switch {
	case ctx.Err() != nil:
		s.unfinished = true
	case sc.Err() != nil:
		return fail(sc.Err())
	case !done:
		return fail(errors.New("the stream ended without [DONE]"))
	case !usage:
		return fail(errors.New("the stream carried no usage"))
	case s.first.IsZero():
		return fail(errors.New("the answer had no content"))
	}
	return s, answer.String()
}

func summarizePrefix(name string, ss []prefixSample, elapsed time.Duration) PrefixResult {
	r := PrefixResult{Target: name, Requests: len(ss)}
	var ttft []time.Duration
	var out int64
	for _, s := range ss {
		switch {
		case s.unfinished:
			r.Unfinished++
		case s.err != "":
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = s.err
			}
		default:
			r.OK++
			ttft = append(ttft, s.ttft)
			out += s.complete
			r.PromptTokens += s.prompt
			r.CachedTokens += s.cached
		}
	}
	r.TTFT50, r.TTFT90 = pct(ttft, 0.5), pct(ttft, 0.9)
	if elapsed > 0 {
		r.OutputTPS = float64(out) / elapsed.Seconds()
	}
	if r.PromptTokens > 0 {
		r.HitRate = float64(r.CachedTokens) / float64(r.PromptTokens)
	}
	return r
}
