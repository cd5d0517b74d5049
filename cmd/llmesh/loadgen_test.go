package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// balancer stands where users put a load balancer in front of the mesh:
// it polls each node's /readyz and sends each request to the next ready
// node. A connection that is refused (nothing reached the node) goes to
// the next one, as nginx's proxy_next_upstream does; nothing else is
// retried.
type balancer struct {
	mu      sync.Mutex
	nodes   map[string]string // name → base URL
	ready   map[string]bool
	next    int
	refused atomic.Int64 // connections refused and sent elsewhere
	// spans are the requests sent, by node, until their answer's body
	// is closed (a few thousand in a test).
	spans     []reqSpan
	transport *http.Transport
	stop      chan struct{}
	done      chan struct{}
}

func newBalancer() *balancer {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	b := &balancer{nodes: map[string]string{}, ready: map[string]bool{}, transport: tr,
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.poll()
	return b
}

func (b *balancer) set(name, url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes[name] = url
}

func (b *balancer) remove(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, name)
	delete(b.ready, name)
}

func (b *balancer) close() { close(b.stop); <-b.done }

// poll checks readiness every 100 ms, as a load balancer's health check
// would (a second's interval is common; a drain's grace covers it).
func (b *balancer) poll() {
	defer close(b.done)
	c := &http.Client{Timeout: 500 * time.Millisecond}
	for {
		b.mu.Lock()
		nodes := maps.Clone(b.nodes)
		b.mu.Unlock()
		for name, u := range nodes {
			resp, err := c.Get(u + "/readyz")
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			b.mu.Lock()
			b.ready[name] = ok
			b.mu.Unlock()
		}
		select {
		case <-b.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pick returns the next ready node other than those in skip.
func (b *balancer) pick(skip []string) (string, string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for name := range b.nodes {
		if b.ready[name] && !slices.Contains(skip, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", "", false
	}
	sort.Strings(names)
	b.next++
	name := names[b.next%len(names)]
	return name, b.nodes[name], true
}

// RoundTrip sends a request to a ready node: the balancer is the openai
// client's transport.
func (b *balancer) RoundTrip(r *http.Request) (*http.Response, error) {
	var skip []string
	for {
		name, base, ok := b.pick(skip)
		if !ok {
			return nil, errors.New("balancer: no ready node")
		}
		u, _ := url.Parse(base)
		req := r.Clone(r.Context())
		req.URL.Scheme, req.URL.Host, req.Host = u.Scheme, u.Host, u.Host
		if r.GetBody != nil {
			req.Body, _ = r.GetBody()
		}
		span := b.begin(name)
		resp, err := b.transport.RoundTrip(req)
		if err != nil {
			b.end(span)
			if errors.Is(err, syscall.ECONNREFUSED) {
				b.refused.Add(1)
				skip = append(skip, name)
				continue
			}
			return nil, err
		}
		resp.Body = &countedBody{ReadCloser: resp.Body, done: func() { b.end(span) }}
		return resp, nil
	}
}

// awaitReady waits until n nodes are ready as the balancer sees them.
func (b *balancer) awaitReady(n int, within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b.mu.Lock()
		ready := 0
		for _, ok := range b.ready {
			if ok {
				ready++
			}
		}
		b.mu.Unlock()
		if ready >= n {
			return true
		}
	}
	return false
}

// reqSpan is one request sent to a node: when it was sent, and when its
// answer ended (zero while under way).
type reqSpan struct {
	node       string
	start, end time.Time
}

func (b *balancer) begin(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spans = append(b.spans, reqSpan{node: name, start: time.Now()})
	return len(b.spans) - 1
}

func (b *balancer) end(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spans[i].end = time.Now()
}

// inFlight returns how many requests are under way at node name.
func (b *balancer) inFlight(name string) int {
	return b.inFlightDuring(name, time.Now(), time.Now())
}

// inFlightDuring returns how many requests to node name were under way
// at some time between from and to: sent by to, not ended before from.
func (b *balancer) inFlightDuring(name string, from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.spans {
		if s.node == name && !s.start.After(to) && (s.end.IsZero() || !s.end.Before(from)) {
			n++
		}
	}
	return n
}

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (c *countedBody) Close() error {
	c.once.Do(c.done)
	return c.ReadCloser.Close()
}

// loadTenant is one tenant of the load: its key, and whether 402 is an
// expected answer (its budget runs out during the test).
type loadTenant struct {
	name, key string
	budgeted  bool
}

// loadReport is what the load saw.
type loadReport struct {
	mu        sync.Mutex
	sent      int
	ok        int
	streams   int
	budget402 int            // the capped tenant's 402s
	budget429 int            // and its 429s for escrow held elsewhere
	budgetWhy map[string]int // their messages
	failures  []string
	truncated []string
	byNode    map[string]int
	firstAt   map[string]time.Time // when each node first answered
	spendUSD  map[string]float64   // by tenant, at the test's prices
}

// firstFailures returns at most ten failures and truncations.
func (r *loadReport) firstFailures() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[:min(len(r.failures), 10)], r.truncated[:min(len(r.truncated), 10)]
}

func (r *loadReport) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("sent %d: %d ok (%d streams), the capped tenant refused %d×402 and %d×429 (%v), %d failed, %d truncated; by node %v",
		r.sent, r.ok, r.streams, r.budget402, r.budget429, r.budgetWhy, len(r.failures), len(r.truncated), r.byNode)
}

// load sends about rps requests per second over the balancer until ctx
// ends, one in five a stream of 2–5 s, and waits for them all. Each
// request is open-loop: it starts on time whatever the others do.
func runLoad(ctx context.Context, b *balancer, tenants []loadTenant, rps int, pricePerTok float64) *loadReport {
	rep := &loadReport{byNode: map[string]int{}, firstAt: map[string]time.Time{}, spendUSD: map[string]float64{}, budgetWhy: map[string]int{}}
	clients := make([]openai.Client, len(tenants))
	for i, t := range tenants {
		clients[i] = openai.NewClient(option.WithBaseURL("http://balancer.invalid/v1"), option.WithAPIKey(t.key),
			option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: b}), option.WithRequestTimeout(60*time.Second))
	}
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return rep
		case <-tick.C:
		}
		ti := i % len(tenants)
		stream := i%5 == 0
		maxTok := 3
		if stream {
			maxTok = 40 + rng.IntN(61) // 2–5 s at the emulators' 20 tokens/s
		}
		rep.mu.Lock()
		rep.sent++
		rep.mu.Unlock()
		wg.Go(func() {
			one(clients[ti], tenants[ti], stream, maxTok, i, pricePerTok, rep)
		})
	}
}

func one(c openai.Client, t loadTenant, stream bool, maxTok, i int, price float64, rep *loadReport) {
	params := openai.ChatCompletionNewParams{
		Model:     "chat",
		MaxTokens: openai.Int(int64(maxTok)),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("request %d", i))},
	}
	node := ""
	track := func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if err == nil {
			node = res.Header.Get("X-Llmesh-Node")
		}
		return res, err
	}
	fail := func(err error) {
		var apiErr *openai.Error
		rep.mu.Lock()
		defer rep.mu.Unlock()
		// The capped tenant's budget runs out: 402, or 429 while the
		// escrow left is held by other nodes or being renewed, are its
		// right answers. (Its every provider answering 429 is the budget
		// too: only cloud-us has a rate limit, and others serve it.)
		if errors.As(err, &apiErr) && t.budgeted {
			msg := apiErr.Message
			if i := strings.Index(msg, " ("); i > 0 {
				msg = msg[:i]
			}
			switch {
			case apiErr.StatusCode == http.StatusPaymentRequired:
				rep.budget402++
				rep.budgetWhy["402"]++
				return
			case apiErr.StatusCode == http.StatusTooManyRequests && (strings.Contains(msg, "escrow") || msg == "every provider tried is rate limited"):
				rep.budget429++
				rep.budgetWhy[msg]++
				return
			}
		}
		if apiErr != nil {
			err = fmt.Errorf("%d %s: %s", apiErr.StatusCode, apiErr.Code, apiErr.Message)
		}
		rep.failures = append(rep.failures, fmt.Sprintf("%s (stream %v, node %q): %v", t.name, stream, node, err))
	}
	succeed := func(usage openai.CompletionUsage) {
		rep.mu.Lock()
		defer rep.mu.Unlock()
		rep.ok++
		if stream {
			rep.streams++
		}
		rep.byNode[node]++
		if _, ok := rep.firstAt[node]; !ok {
			rep.firstAt[node] = time.Now()
		}
		rep.spendUSD[t.name] += float64(usage.PromptTokens+usage.CompletionTokens) * price
	}
	if !stream {
		cc, err := c.Chat.Completions.New(context.Background(), params, option.WithMiddleware(track))
		if err != nil {
			fail(err)
			return
		}
		succeed(cc.Usage)
		return
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(context.Background(), params, option.WithMiddleware(track))
	finished := false
	var usage openai.CompletionUsage
	for s.Next() {
		ch := s.Current()
		for _, choice := range ch.Choices {
			if choice.FinishReason != "" {
				finished = true
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := s.Err(); err != nil {
		if node != "" && !finished && !isRefusal(err) {
			rep.mu.Lock()
			rep.truncated = append(rep.truncated, fmt.Sprintf("%s node %q: %v", t.name, node, err))
			rep.mu.Unlock()
		}
		fail(err)
		return
	}
	if !finished {
		rep.mu.Lock()
		rep.truncated = append(rep.truncated, fmt.Sprintf("%s node %q: no finish_reason", t.name, node))
		rep.mu.Unlock()
		fail(errors.New("stream ended without a finish_reason"))
		return
	}
	succeed(usage)
}

// isRefusal tells an HTTP error answer (the stream never started) from a
// stream that broke.
func isRefusal(err error) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr)
}

// freePorts reserves n loopback ports (listening on port 0 and closing):
// a node keeps its ports across a restart, as a real one does.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}
