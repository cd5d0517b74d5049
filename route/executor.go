package route

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ResponseSink is where an answer goes: the client's HTTP response, or a
// forwarding stream back to the node the client called. Nothing reaches it
// until an attempt has produced its first byte, so failures before that can
// still move to the next target.
type ResponseSink interface {
	Header() http.Header
	WriteHeader(status int)
	Write(p []byte) (int, error)
	// Flush sends what was written so far; an error means the client is
	// gone or too slow to read.
	Flush() error
}

// BudgetGate reserves a tenant's spend before an attempt and settles the
// actual cost after it. The ledger's budget leases plug in here.
type BudgetGate interface {
	// Reserve holds usd of tenant's budget. When it cannot yet (the
	// escrow is being topped up) it waits, behind requests of a priority
	// as high (lower prio) that came first, until until or until ctx is
	// done, and then fails with a *RetryAfterError; it fails with
	// ErrBudgetExceeded when the budget left cannot cover usd.
	Reserve(ctx context.Context, tenant string, usd float64, prio int, until, now time.Time) (BudgetHold, error)
}

// BudgetHold is one reservation; Settle replaces it by the actual cost.
type BudgetHold interface {
	Settle(usd float64)
}

// Outcome classifies one attempt.
type Outcome string

const (
	OutcomeOK          Outcome = "ok"
	OutcomeRateLimited Outcome = "rate_limited"  // 429: cooled down, not a failure
	OutcomeRefused     Outcome = "refused"       // the provider rejected the request itself (400, 413, 422)
	OutcomeHTTPError   Outcome = "http_error"    // 5xx, 401, 403, 404...
	OutcomeConnect     Outcome = "connect_error" // no answer: refused, reset, DNS, TLS
	OutcomeTimeout     Outcome = "timeout"
	OutcomeBadResponse Outcome = "bad_response" // an answer that is not what the API promises
	OutcomeBroken      Outcome = "broken_stream"
	OutcomeTooLarge    Outcome = "too_large" // an answer beyond the node's limit: the request asked for it
	OutcomeCanceled    Outcome = "canceled"  // the client went away
	// OutcomeBlocked is a target the executor's residency guard refused
	// to call: a plan that broke the invariant. It should never happen.
	OutcomeBlocked Outcome = "blocked"
)

// Observer is told of every attempt, for metrics.
type Observer interface {
	Attempt(provider string, outcome Outcome, d time.Duration)
}

// Usage is the token usage of one answer.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Attempt is one try of one target.
type Attempt struct {
	Provider string
	Outcome  Outcome
	Status   int // the provider's HTTP status; 0 when none came
	Detail   string
	Duration time.Duration
}

// Result describes how a request was served.
type Result struct {
	Target   *Target // the target that answered; nil when none did
	Attempts []Attempt
	Usage    Usage
	// UsageCounted means the provider reported no usage and the node
	// counted the tokens itself.
	UsageCounted bool
	Cost         float64       // USD
	TTFT         time.Duration // to the first streamed event
	// Truncated means a stream broke after its first byte: the client got
	// an error event instead of [DONE].
	Truncated bool
	// AdmissionWait is how long the request waited for budget escrow or
	// a rate share before it was sent (or refused).
	AdmissionWait time.Duration
	// ClientGone means the client disconnected or stopped reading.
	ClientGone bool
	// Provider is the provider that answered (through a via node, the
	// one that node chose), and Replica its replica's host when it has
	// several.
	Provider, Replica string

	// The plan, the target being tried and the failures before it, from
	// which the X-LLMesh-Route explanation is built at commit.
	plan   *Plan
	chosen int
	failed []string
}

// Route returns the X-LLMesh-Route explanation of the target tried last.
func (r *Result) Route() string {
	if r.plan == nil {
		return ""
	}
	return r.plan.Explain(r.chosen, r.failed)
}

// Executor runs plans: it calls each target in turn until one answers,
// and relays that answer to the sink.
type Executor struct {
	cfg       ExecutorConfig
	client    *http.Client
	guard     Guard
	tracker   *Tracker
	replicas  *Tracker   // nil: replicas not tracked apart
	quota     QuotaGate  // nil: no rate limits
	budget    BudgetGate // nil: no budgets
	tokens    *Tokenizer
	observer  Observer  // nil: none
	affinity  *Affinity // nil: sessions not remembered
	forwarder Forwarder // nil: a node alone
	redactor  *Redactor // nil: nothing to redact
	now       func() time.Time
}

// ExecutorDeps are the parts an Executor works with. Guard, Tracker and
// Tokenizer are required; the rest may be nil.
type ExecutorDeps struct {
	Guard   Guard
	Tracker *Tracker
	// Replicas tracks the health of each replica of providers that have
	// several, by Provider.ReplicaKey.
	Replicas  *Tracker
	Quota     QuotaGate
	Budget    BudgetGate
	Tokenizer *Tokenizer
	Observer  Observer
	// Affinity learns which provider served each session.
	Affinity *Affinity
	// Forwarder carries targets with a via node to it.
	Forwarder Forwarder
	// Transport, if set, carries requests to providers in place of the
	// executor's own pooled transport (tests record calls with it).
	Transport http.RoundTripper
	Clock     func() time.Time // nil: time.Now
	// Redactor takes the node's secrets out of attempts' details.
	Redactor *Redactor
}

// NewExecutor returns an Executor with its own connection pool.
func NewExecutor(cfg ExecutorConfig, d ExecutorDeps) *Executor {
	var rt http.RoundTripper = d.Transport
	if rt == nil {
		rt = newTransport(cfg)
	}
	e := &Executor{
		cfg: cfg,
		client: &http.Client{
			Transport: rt,
			// Never follow a redirect: it would re-send the request, and
			// an Azure api-key header with it, to wherever it points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		guard:     d.Guard,
		tracker:   d.Tracker,
		replicas:  d.Replicas,
		quota:     d.Quota,
		budget:    d.Budget,
		tokens:    d.Tokenizer,
		observer:  d.Observer,
		affinity:  d.Affinity,
		forwarder: d.Forwarder,
		redactor:  d.Redactor,
		now:       d.Clock,
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e
}

// Close releases idle upstream connections.
func (e *Executor) Close() { e.client.CloseIdleConnections() }

// Execute tries plan's targets in order until one answers, within
// MaxAttempts. A failure before the first byte reaches sink moves to the
// next target; after it, a stream is never re-sent: a broken stream ends
// with an error event and Result.Truncated. The returned error is nil
// when an answer (complete or truncated) was written to sink; otherwise
// nothing was written and the error says why: a *UpstreamReply to relay as
// it is, a *RetryAfterError, ErrBudgetExceeded, ErrUpstream, or the
// context's error when the client went away. Error messages name
// providers and statuses only: what a provider said in an error body can
// hold internal names, so it goes to Result.Attempts, never the client.
func (e *Executor) Execute(ctx context.Context, req *Request, plan *Plan, sink ResponseSink) (*Result, error) {
	res := &Result{}
	var failed []string
	var lastErr error
	var rateWait time.Duration
	farLimited := false // a node forwarded to answered 429
	attempts := 0
	for i := range plan.Targets {
		if attempts >= e.cfg.MaxAttempts {
			break
		}
		if err := ctx.Err(); err != nil {
			res.ClientGone = true
			return res, err
		}
		t := &plan.Targets[i]
		// The invariant, re-checked right before every call: whatever
		// made the plan, a target that breaks it is never tried.
		if err := e.guard.Check(req, t); err != nil {
			res.Attempts = append(res.Attempts, Attempt{Provider: t.Provider(), Outcome: OutcomeBlocked, Detail: err.Error()})
			if e.observer != nil {
				e.observer.Attempt(t.Provider(), OutcomeBlocked, 0)
			}
			if lastErr == nil {
				lastErr = err
			}
			continue
		}
		if t.Via != "" {
			if e.forwarder == nil {
				continue
			}
			attempts++
			res.plan, res.chosen, res.failed = plan, i, failed
			a := e.forward(ctx, req, t, sink, res)
			if a.gone {
				attempts-- // a stale plan's target: not tried
				continue
			}
			if done, err := e.finish(ctx, req, t, a, res); done {
				return res, err
			}
			if a.Outcome == OutcomeRateLimited {
				rateWait = minPositive(rateWait, a.retryAfter)
				// The far node waited for its escrow or share itself:
				// its 429 is its answer, not one to wait out again here.
				farLimited = true
			}
			failed = append(failed, t.Provider()+" via "+t.Via+" ("+a.short()+")")
			switch {
			case a.unavailable == nil:
				lastErr = ErrUpstream
			case lastErr == nil || !errors.Is(lastErr, ErrUpstream):
				// The far node had nothing to try: unless some provider
				// failed, that is the answer.
				lastErr = a.unavailable
			}
			continue
		}
		now := e.now()
		// Budget first: a request waiting for escrow holds no provider's
		// admission (a half-open probe's among them) while it waits.
		var hold BudgetHold
		if e.budget != nil {
			h, err := e.budget.Reserve(ctx, req.Tenant, t.MaxCost, req.Priority, req.AdmitBy, now)
			if waited := e.now().Sub(now); waited > 0 {
				res.AdmissionWait += waited
				now = e.now()
			}
			if err != nil {
				lastErr = err
				continue
			}
			hold = h
		}
		adm, ok := e.tracker.Acquire(t.Provider(), now)
		if !ok {
			if hold != nil {
				hold.Settle(0)
			}
			continue // ejected or cooled down since planning
		}
		var radm Admission
		ring := t.Offer.Provider.Ring
		if ring != nil && e.replicas != nil {
			if radm, ok = e.replicas.Acquire(t.Offer.Provider.ReplicaKey(t.Replica), now); !ok {
				e.tracker.Release(adm)
				if hold != nil {
					hold.Settle(0)
				}
				continue // this replica is ejected; the next target is another
			}
		}
		release := func() {
			e.tracker.Release(adm)
			if radm.provider != "" {
				e.replicas.Release(radm)
			}
		}
		if e.quota != nil {
			take := e.quota.Take
			if st, ok := e.quota.(spillTaker); ok && req.Spilled && t.Provider() == req.Hint {
				take = st.TakeSpilled
			}
			if ok, wait := take(t.Provider(), t.Tokens, now); !ok {
				release()
				if hold != nil {
					hold.Settle(0)
				}
				rateWait = minPositive(rateWait, wait)
				continue
			}
		}
		attempts++
		res.plan, res.chosen, res.failed = plan, i, failed
		if ring != nil {
			ring.Acquire(t.Replica)
		}
		a := e.attempt(ctx, req, t, sink, res)
		if ring != nil {
			ring.Release(t.Replica)
		}
		if wait := e.settle(t, adm, radm, a, hold, res); wait > 0 {
			rateWait = minPositive(rateWait, wait)
		}
		if a.committed {
			res.Provider = t.Provider()
			if ring != nil {
				res.Replica = ReplicaName(t.Endpoint())
				ring.Seat(req.Session, t.Replica, e.now())
			}
		}
		if done, err := e.finish(ctx, req, t, a, res); done {
			return res, err
		}
		failed = append(failed, t.Provider()+" ("+a.short()+")")
		lastErr = ErrUpstream
	}
	switch {
	case lastErr == nil && rateWait > 0,
		attempts > 0 && allRateLimited(res.Attempts):
		return res, &RetryAfterError{After: max(rateWait, time.Second), Msg: "every provider tried is rate limited", Transient: !farLimited}
	case lastErr == nil:
		return res, fmt.Errorf("%w: every provider became unavailable while the request was planned", ErrNoProvider)
	case errors.Is(lastErr, ErrUpstream):
		return res, fmt.Errorf("%w: %s failed: %s", ErrUpstream, plural(len(failed), "provider", "providers"), strings.Join(failed, "; "))
	}
	return res, lastErr
}

// spillTaker is a QuotaGate that can take for a request a peer spilled
// here without counting it as this node's demand.
type spillTaker interface {
	TakeSpilled(provider string, tokens int, now time.Time) (bool, time.Duration)
}

// finish records an attempt and reports whether the request is done,
// with the error to return: it is when the answer reached the client,
// the client went away, or the request itself was refused.
func (e *Executor) finish(ctx context.Context, req *Request, t *Target, a *attemptResult, res *Result) (bool, error) {
	res.Attempts = append(res.Attempts, a.Attempt)
	if e.observer != nil {
		e.observer.Attempt(t.Provider(), a.Outcome, a.Duration)
	}
	if a.committed {
		res.Target = t
		if e.affinity != nil && req.Session != "" && a.Outcome != OutcomeCanceled {
			e.affinity.Remember(req.Session, res.Provider)
		}
	}
	switch {
	case a.Outcome == OutcomeCanceled:
		res.ClientGone = true
		if a.committed {
			return true, nil
		}
		return true, ctx.Err()
	case a.committed:
		return true, nil
	case a.final != nil:
		return true, a.final
	}
	return false, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func allRateLimited(as []Attempt) bool {
	for _, a := range as {
		if a.Outcome != OutcomeRateLimited {
			return false
		}
	}
	return len(as) > 0
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// attemptResult is an Attempt plus what the executor does next.
type attemptResult struct {
	Attempt
	committed  bool          // something reached the sink
	final      error         // stop and return this error (nothing committed)
	retryAfter time.Duration // for OutcomeRateLimited
	// answered means the provider accepted the request (200): it may bill
	// for it even if its answer proved unusable.
	answered bool
	usage    Usage
	// counted means the node counted usage itself; known that usage is
	// known at all, from the provider or counted.
	counted, known bool
	// ttft is a stream's time to its first event; total the time to a
	// whole non-streamed answer. Both feed the latency averages.
	ttft, total time.Duration
	// gone means the via node was no longer one to forward to: nothing
	// was tried.
	gone bool
	// unavailable is a via node's answer that it had no provider to try
	// (ErrNoCompliantProvider or ErrNoProvider), rather than a failure.
	unavailable error
}

func (a *attemptResult) short() string {
	if a.Status != 0 && a.Status != http.StatusOK {
		return strconv.Itoa(a.Status)
	}
	return string(a.Outcome)
}

func (e *Executor) fail(a *attemptResult, o Outcome, format string, args ...any) *attemptResult {
	a.Outcome = o
	a.Detail = e.redactor.Redact(fmt.Sprintf(format, args...))
	return a
}

// settle reports the attempt to the tracker, gives back unused rate and
// budget, and accounts what was used. An answer the provider accepted but
// whose usage is unknown is charged at the attempt's upper bound: the
// provider may bill for it, and a budget must never be overspent. It
// returns the cooldown a 429 imposed.
func (e *Executor) settle(t *Target, adm, radm Admission, a *attemptResult, hold BudgetHold, res *Result) time.Duration {
	now := e.now()
	var cooldown time.Duration
	report := func(tr *Tracker, ad Admission) time.Duration {
		switch a.Outcome {
		case OutcomeOK:
			tr.Success(ad, a.ttft, a.total)
		case OutcomeRateLimited:
			return tr.RateLimited(ad, a.retryAfter, now)
		case OutcomeRefused, OutcomeTooLarge, OutcomeCanceled:
			tr.Release(ad)
		default:
			tr.Failure(ad, now)
		}
		return 0
	}
	if a.Outcome == OutcomeRateLimited {
		// The provider's own 429 (this node called it): the mesh-wide
		// share handed out shrinks. A peer's refusal of a forward is
		// not one, and never gets here.
		if rl, ok := e.quota.(interface{ RateLimited(provider string) }); ok {
			rl.RateLimited(t.Provider())
		}
	}
	if radm.provider == "" {
		cooldown = report(e.tracker, adm)
	} else {
		// A replica's 429 cools that replica down, not its siblings; its
		// failures count against both (the provider's only when they run
		// on, which failing over to siblings interrupts).
		cooldown = report(e.replicas, radm)
		if a.Outcome == OutcomeRateLimited {
			e.tracker.Release(adm)
		} else {
			report(e.tracker, adm)
		}
	}
	u := Usage{PromptTokens: max(a.usage.PromptTokens, 0), CompletionTokens: max(a.usage.CompletionTokens, 0)}
	cost := t.Offer.Model.Cost(u.PromptTokens, u.CompletionTokens)
	used := u.PromptTokens + u.CompletionTokens
	if a.answered && !a.known {
		cost, used = t.MaxCost, t.Tokens
	}
	if !a.answered {
		cost, used = 0, 0
	}
	if e.quota != nil && used != t.Tokens {
		e.quota.Return(t.Provider(), t.Tokens-used, now)
	}
	if hold != nil {
		hold.Settle(cost)
	}
	if a.committed {
		res.Usage, res.UsageCounted, res.Cost = u, a.counted, cost
	}
	return cooldown
}

// attempt calls one target and, if it answers, relays the answer.
func (e *Executor) attempt(ctx context.Context, req *Request, t *Target, sink ResponseSink, res *Result) *attemptResult {
	a := &attemptResult{Attempt: Attempt{Provider: t.Provider()}}
	start := e.now()
	defer func() { a.Duration = e.now().Sub(start) }()

	// One timer enforces each phase: the first byte (or, unstreamed, the
	// whole answer), then the gap between events.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	phase := e.cfg.ResponseTimeout
	if req.Chat.Stream {
		phase = e.cfg.FirstByteTimeout
	}
	timer := time.AfterFunc(phase, func() { timedOut.Store(true); cancel() })
	defer timer.Stop()
	readErr := func(err error, what string) *attemptResult {
		switch {
		case ctx.Err() != nil:
			return e.fail(a, OutcomeCanceled, "client went away")
		case timedOut.Load():
			return e.fail(a, OutcomeTimeout, "%s: timed out", what)
		}
		return e.fail(a, OutcomeConnect, "%s: %v", what, cleanErr(err))
	}

	body := req.Chat.UpstreamBody(t.Offer.UpstreamModel())
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, t.Endpoint(), bytes.NewReader(body))
	if err != nil {
		return e.fail(a, OutcomeConnect, "build request: %v", err)
	}
	hreq.Header["Content-Type"] = []string{"application/json"}
	hreq.Header["User-Agent"] = []string{e.cfg.UserAgent}
	if req.Chat.Stream {
		hreq.Header["Accept"] = []string{"text/event-stream"}
	} else {
		hreq.Header["Accept"] = []string{"application/json"}
	}
	if req.TraceParent != "" {
		hreq.Header["Traceparent"] = []string{req.TraceParent}
		if req.TraceState != "" {
			hreq.Header["Tracestate"] = []string{req.TraceState}
		}
	}
	setAuth(hreq.Header, t.Offer.Provider)
	resp, err := e.client.Do(hreq)
	if err != nil {
		return readErr(err, "request")
	}
	defer resp.Body.Close()
	a.Status = resp.StatusCode
	e.noteRateWindow(t.Provider(), resp.Header)
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		a.answered = true
	case code == http.StatusTooManyRequests:
		a.retryAfter = retryAfter(resp.Header, e.now())
		return e.fail(a, OutcomeRateLimited, "429: %s", snippet(resp.Body, 256))
	case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge || code == http.StatusUnprocessableEntity:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		a.final = &UpstreamReply{Provider: t.Provider(), Status: code, Header: resp.Header, Body: b}
		return e.fail(a, OutcomeRefused, "%d", code)
	default:
		return e.fail(a, OutcomeHTTPError, "%d: %s", code, snippet(resp.Body, 256))
	}
	if req.Chat.Stream {
		return e.relay(req, t, resp, sink, res, a, start, timer, readErr)
	}
	return e.whole(req, t, resp, sink, res, a, start, readErr)
}

// noteRateWindow records the provider's own count of what is left of its
// rate window, when it sends one.
func (e *Executor) noteRateWindow(provider string, h http.Header) {
	req, rok := headerInt(h, "X-Ratelimit-Remaining-Requests")
	tok, tok2 := headerInt(h, "X-Ratelimit-Remaining-Tokens")
	if rok || tok2 {
		e.tracker.RateWindow(provider, req, tok)
	}
}

func headerInt(h http.Header, key string) (int64, bool) {
	v := h[key]
	if len(v) == 0 {
		return -1, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
	if err != nil || n < 0 {
		return -1, false
	}
	return n, true
}

// respBuffers recycles the buffers that hold non-streamed answers.
var respBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// whole reads a non-streamed answer, checks it, and writes it to sink.
func (e *Executor) whole(req *Request, t *Target, resp *http.Response, sink ResponseSink, res *Result, a *attemptResult, start time.Time, readErr func(error, string) *attemptResult) *attemptResult {
	buf := respBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer respBuffers.Put(buf)
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, e.cfg.MaxResponseBytes+1)); err != nil {
		return readErr(err, "read answer")
	}
	if int64(buf.Len()) > e.cfg.MaxResponseBytes {
		// The request asked for more than the node relays (n × max_tokens,
		// say); another provider would answer the same.
		a.final = fmt.Errorf("%w: %s answered with more than the node's limit of %d bytes; ask for fewer or shorter choices",
			ErrUpstream, t.Provider(), e.cfg.MaxResponseBytes)
		return e.fail(a, OutcomeTooLarge, "answer larger than %d bytes", e.cfg.MaxResponseBytes)
	}
	var doc struct {
		Choices []struct{} `json:"choices"`
		Usage   *Usage     `json:"usage"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil || len(doc.Choices) == 0 {
		return e.fail(a, OutcomeBadResponse, "answer is not a chat completion")
	}
	if doc.Usage != nil {
		a.usage = *doc.Usage
	} else {
		a.usage, a.counted = e.countWhole(req, buf.Bytes()), true
	}
	a.known = true
	a.total = e.now().Sub(start)
	h := sink.Header()
	setRouteHeaders(h, t, e.cfg.NodeName, res.Route())
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(buf.Len())}
	sink.WriteHeader(http.StatusOK)
	a.committed = true
	a.Outcome = OutcomeOK
	if _, err := sink.Write(buf.Bytes()); err != nil {
		return e.fail(a, OutcomeCanceled, "write answer: %v", err)
	}
	return a
}

// countWhole counts the usage of an answer that reported none.
func (e *Executor) countWhole(req *Request, answer []byte) Usage {
	var doc struct {
		Choices []struct {
			Message struct {
				Content   string     `json:"content"`
				ToolCalls []ToolCall `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(answer, &doc)
	u := Usage{PromptTokens: e.tokens.CountMessages(req.Chat.Messages)}
	for _, c := range doc.Choices {
		u.CompletionTokens += e.tokens.Count(c.Message.Content)
		for _, tc := range c.Message.ToolCalls {
			u.CompletionTokens += e.tokens.Count(tc.Function.Name) + e.tokens.Count(tc.Function.Arguments)
		}
	}
	return u
}

// setRouteHeaders names the provider, replica and calling node, and the
// reason for the choice.
func setRouteHeaders(h http.Header, t *Target, node, route string) {
	h["X-Llmesh-Provider"] = []string{t.Provider()}
	h["X-Llmesh-Route"] = []string{route}
	via := t.Via
	if via == "" {
		via = node
	}
	h["X-Llmesh-Via"] = []string{via}
	if len(t.Offer.Endpoints) > 1 {
		h["X-Llmesh-Replica"] = []string{ReplicaName(t.Endpoint())}
	}
}

// ReplicaName names a replica by its endpoint's host, as X-LLMesh-Replica
// does.
func ReplicaName(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Host
	}
	return endpoint
}

// cleanErr strips the method and URL net/http puts in front of transport
// errors; the URL may carry an Azure api-version but never a key, and the
// provider name already says where the error came from.
func cleanErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
