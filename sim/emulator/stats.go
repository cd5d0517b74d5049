package emulator

import (
	"bytes"
	"maps"
	"net/http"
	"sync"
)

// Stats counts what the emulator has done since New.
type Stats struct {
	// Requests counts the API requests received (everything but the
	// /emulator/ control endpoints), whatever their answer.
	Requests int64 `json:"requests"`
	// ByStatus counts answers by HTTP status. Requests that got no answer
	// (hung, aborted, abandoned before their headers) are not in it.
	ByStatus map[int]int64 `json:"by_status"`
	// Streams counts the streams started (200 headers sent);
	// StreamsCompleted those that sent data: [DONE].
	Streams          int64 `json:"streams"`
	StreamsCompleted int64 `json:"streams_completed"`
	// PromptTokens and CompletionTokens count the tokens of the
	// generating requests (chat, embeddings, completions, Messages,
	// Responses) that started generating: the prompt in full, the output
	// as far as it was delivered (a non-streaming body whole or not at
	// all; embeddings have none).
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// ChargedUSD is those tokens at their model's Price.
	ChargedUSD float64 `json:"charged_usd"`
	// InFlight is the API requests being handled now.
	InFlight int64 `json:"in_flight"`
}

// Received is one API request as it arrived.
type Received struct {
	Method   string
	Path     string      // URL path, decoded
	RawQuery string      // query string without the '?'
	Header   http.Header // a copy
	Body     []byte      // the body as sent; nil when it was too large to read
}

// receivedKept is how many requests Received returns.
const receivedKept = 16

// recorder holds the counters and the last requests, under one lock: a
// request takes it a few times, which costs little beside the rest.
type recorder struct {
	mu    sync.Mutex
	stats Stats
	ring  [receivedKept]Received
	next  int // ring index of the next request
	count int // requests in ring
	// closed is set by Shutdown: no request enters after it, and drained
	// is closed when the last one in flight leaves.
	closed  bool
	drained chan struct{}
}

// enter records the arrival of an API request and returns its sequence
// number (1 for the first), or false after Shutdown.
func (r *recorder) enter(req *http.Request, body []byte) (uint64, bool) {
	header := req.Header.Clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, false
	}
	r.stats.Requests++
	r.stats.InFlight++
	r.ring[r.next] = Received{Method: req.Method, Path: req.URL.Path, RawQuery: req.URL.RawQuery, Header: header, Body: body}
	r.next = (r.next + 1) % receivedKept
	r.count = min(r.count+1, receivedKept)
	return uint64(r.stats.Requests), true
}

// exit records that a request entered has been handled.
func (r *recorder) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.InFlight--
	if r.closed && r.stats.InFlight == 0 {
		close(r.drained)
	}
}

// close stops requests from entering and returns a channel closed once none
// is in flight.
func (r *recorder) close() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		if r.stats.InFlight == 0 {
			close(r.drained)
		}
	}
	return r.drained
}

func (r *recorder) answered(status int) {
	r.mu.Lock()
	r.stats.ByStatus[status]++
	r.mu.Unlock()
}

func (r *recorder) streamStarted() {
	r.mu.Lock()
	r.stats.ByStatus[http.StatusOK]++
	r.stats.Streams++
	r.mu.Unlock()
}

func (r *recorder) streamCompleted() {
	r.mu.Lock()
	r.stats.StreamsCompleted++
	r.mu.Unlock()
}

func (r *recorder) charge(prompt, completion int, usd float64) {
	r.mu.Lock()
	r.stats.PromptTokens += int64(prompt)
	r.stats.CompletionTokens += int64(completion)
	r.stats.ChargedUSD += usd
	r.mu.Unlock()
}

func (r *recorder) snapshot() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.ByStatus = maps.Clone(r.stats.ByStatus)
	return s
}

// received returns copies of the kept requests, oldest first.
func (r *recorder) received() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Received, 0, r.count)
	for i := range r.count {
		rec := r.ring[(r.next-r.count+i+receivedKept)%receivedKept]
		rec.Header = rec.Header.Clone()
		rec.Body = bytes.Clone(rec.Body)
		out = append(out, rec)
	}
	return out
}
