// Package loadtest drives a mesh the way its users do, for tests: a
// balancer that stands where users put a load balancer (it polls each
// node's /readyz and sends each request to a ready node), and open-loop
// load through the official openai-go client, streams among it, with a
// report of what every request saw. Tests only: the binary never links it.
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Balancer stands where users put a load balancer in front of the mesh:
// it polls each node's /readyz and sends each request to the next ready
// node. A connection that is refused (nothing reached the node) goes to
// the next one, as nginx's proxy_next_upstream does; nothing else is
// retried.
type Balancer struct {
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

// NewBalancer starts a balancer with no nodes; Close stops its polling.
func NewBalancer() *Balancer {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	b := &Balancer{nodes: map[string]string{}, ready: map[string]bool{}, transport: tr,
		stop: make(chan struct{}), done: make(chan struct{})}
	go b.poll()
	return b
}

// Set adds node name at base URL url (or moves it).
func (b *Balancer) Set(name, url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes[name] = url
}

// Remove takes node name out of rotation.
func (b *Balancer) Remove(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, name)
	delete(b.ready, name)
}

// Refused counts the connections refused (nothing reached the node) and
// sent to another node.
func (b *Balancer) Refused() int64 { return b.refused.Load() }

// Close stops the readiness polling.
func (b *Balancer) Close() { close(b.stop); <-b.done }

// poll checks readiness every 100 ms, as a load balancer's health check
// would (a second's interval is common; a drain's grace covers it).
func (b *Balancer) poll() {
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
func (b *Balancer) pick(skip []string) (string, string, bool) {
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
func (b *Balancer) RoundTrip(r *http.Request) (*http.Response, error) {
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

// AwaitReady waits until n nodes are ready as the balancer sees them.
func (b *Balancer) AwaitReady(n int, within time.Duration) bool {
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

func (b *Balancer) begin(name string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spans = append(b.spans, reqSpan{node: name, start: time.Now()})
	return len(b.spans) - 1
}

func (b *Balancer) end(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spans[i].end = time.Now()
}

// InFlight returns how many requests are under way at node name.
func (b *Balancer) InFlight(name string) int {
	return b.InFlightDuring(name, time.Now(), time.Now())
}

// InFlightDuring returns how many requests to node name were under way
// at some time between from and to: sent by to, not ended before from.
func (b *Balancer) InFlightDuring(name string, from, to time.Time) int {
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

// Tenant is one tenant of the load: its key, and whether 402 is an
// expected answer (its budget runs out during the test).
type Tenant struct {
	Name, Key string
	Budgeted  bool
}

// Report is what the load saw. Read it once Run has returned.
type Report struct {
	mu         sync.Mutex
	Sent       int
	OK         int
	Streams    int
	Budget402  int            // the budgeted tenants' 402s
	BudgetWait int            // and their 503 admission_timeouts for escrow held elsewhere
	BudgetWhy  map[string]int // their messages
	Failures   []string
	Truncated  []string
	ByNode     map[string]int
	FirstAt    map[string]time.Time // when each node first answered
	SpendUSD   map[string]float64   // by tenant, at the load's price
}

// FirstFailures returns at most ten failures and truncations.
func (r *Report) FirstFailures() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Failures[:min(len(r.Failures), 10)], r.Truncated[:min(len(r.Truncated), 10)]
}

func (r *Report) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("sent %d: %d ok (%d streams), the budgeted tenants were refused %d×402 and %d×503 admission_timeout (%v), %d failed, %d truncated; by node %v",
		r.Sent, r.OK, r.Streams, r.Budget402, r.BudgetWait, r.BudgetWhy, len(r.Failures), len(r.Truncated), r.ByNode)
}

// Config is a load: RPS requests a second of Model, one in five a
// stream of 40–100 tokens (2–5 s at 20 tokens a second), the others of 3
// tokens; PricePerToken prices what each tenant was served.
type Config struct {
	Model         string
	RPS           int
	PricePerToken float64
}

// Run sends the load over the balancer until ctx ends, and waits for every
// request. Each request is open-loop: it starts on time whatever the
// others do.
func Run(ctx context.Context, b *Balancer, tenants []Tenant, cfg Config) *Report {
	rps, pricePerTok := cfg.RPS, cfg.PricePerToken
	rep := &Report{ByNode: map[string]int{}, FirstAt: map[string]time.Time{}, SpendUSD: map[string]float64{}, BudgetWhy: map[string]int{}}
	clients := make([]openai.Client, len(tenants))
	for i, t := range tenants {
		clients[i] = openai.NewClient(option.WithBaseURL("http://balancer.invalid/v1"), option.WithAPIKey(t.Key),
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
		rep.Sent++
		rep.mu.Unlock()
		wg.Go(func() {
			one(clients[ti], tenants[ti], cfg.Model, stream, maxTok, i, pricePerTok, rep)
		})
	}
}

func one(c openai.Client, t Tenant, model string, stream bool, maxTok, i int, price float64, rep *Report) {
	params := openai.ChatCompletionNewParams{
		Model:     model,
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
		// The capped tenant's budget runs out: 402, or 503
		// admission_timeout while the escrow left is held by other nodes
		// or being renewed, are its right answers.
		if errors.As(err, &apiErr) && t.Budgeted {
			msg := apiErr.Message
			if i := strings.Index(msg, " ("); i > 0 {
				msg = msg[:i]
			}
			switch {
			case apiErr.StatusCode == http.StatusPaymentRequired:
				rep.Budget402++
				rep.BudgetWhy["402"]++
				return
			case apiErr.StatusCode == http.StatusServiceUnavailable && apiErr.Code == "admission_timeout":
				rep.BudgetWait++
				rep.BudgetWhy[msg]++
				return
			}
		}
		if apiErr != nil {
			err = fmt.Errorf("%d %s: %s", apiErr.StatusCode, apiErr.Code, apiErr.Message)
		}
		rep.Failures = append(rep.Failures, fmt.Sprintf("%s (stream %v, node %q): %v", t.Name, stream, node, err))
	}
	succeed := func(usage openai.CompletionUsage) {
		rep.mu.Lock()
		defer rep.mu.Unlock()
		rep.OK++
		if stream {
			rep.Streams++
		}
		rep.ByNode[node]++
		if _, ok := rep.FirstAt[node]; !ok {
			rep.FirstAt[node] = time.Now()
		}
		rep.SpendUSD[t.Name] += float64(usage.PromptTokens+usage.CompletionTokens) * price
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
			rep.Truncated = append(rep.Truncated, fmt.Sprintf("%s node %q: %v", t.Name, node, err))
			rep.mu.Unlock()
		}
		fail(err)
		return
	}
	if !finished {
		rep.mu.Lock()
		rep.Truncated = append(rep.Truncated, fmt.Sprintf("%s node %q: no finish_reason", t.Name, node))
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
