package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
	// CachedTokens are the prompt tokens the provider served from its
	// prompt cache, part of PromptTokens: priced at the model's cached
	// input price.
	CachedTokens int `json:"cached_tokens"`
}

// UnmarshalJSON reads chat's usage (prompt_tokens, completion_tokens and
// prompt_tokens_details.cached_tokens) or the Responses API's
// (input_tokens, output_tokens and input_tokens_details.cached_tokens).
// An Anthropic provider's cache reads arrive here as chat's cached
// tokens (route/anthropic translates its usage).
func (u *Usage) UnmarshalJSON(b []byte) error {
	type details struct {
		CachedTokens int `json:"cached_tokens"`
	}
	var w struct {
		PromptTokens       int      `json:"prompt_tokens"`
		CompletionTokens   int      `json:"completion_tokens"`
		PromptDetails      *details `json:"prompt_tokens_details"`
		InputTokens        int      `json:"input_tokens"`
		OutputTokens       int      `json:"output_tokens"`
		InputTokensDetails *details `json:"input_tokens_details"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = Usage{PromptTokens: w.PromptTokens + w.InputTokens, CompletionTokens: w.CompletionTokens + w.OutputTokens}
	if d := w.PromptDetails; d != nil {
		u.CachedTokens += d.CachedTokens
	}
	if d := w.InputTokensDetails; d != nil {
		u.CachedTokens += d.CachedTokens
	}
	return nil
}

// Clean returns u with negative counts cleared and no more cached
// tokens than prompt tokens: what an answer is charged for, whatever a
// provider reported.
func (u Usage) Clean() Usage {
	u.PromptTokens, u.CompletionTokens = max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
	u.CachedTokens = min(max(u.CachedTokens, 0), u.PromptTokens)
	return u
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
	first    [1]Attempt // Attempts' own room for the first
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
	// one that node chose), and Replica its replica's name when it has
	// several.
	Provider, Replica string
	// Stored is what this node keeps of a Responses answer it relayed
	// from the provider; nil for every other answer, and for one through
	// a via node (which keeps it).
	Stored *StoredResponse
	// Fallbacks are the moves past answers of a class the request's
	// group falls back on (fallback_on), in order.
	Fallbacks []Fallback
	// CacheHit means the node answered from its response cache: no
	// provider was called and nothing reserved or spent (Cost is 0,
	// Target nil); Provider is the provider that made the stored answer.
	CacheHit bool

	// The plan, the target being tried and the failures before it, from
	// which the X-LLMesh-Route explanation is built at commit.
	plan   *Plan
	chosen int
	failed []string
}

// Route returns the X-LLMesh-Route explanation of the target tried last.
func (r *Result) Route() string {
	if r.plan == nil && r.CacheHit {
		return "cache hit: no provider called (the answer " + r.Provider + " made for the same request earlier)"
	}
	if r.plan == nil {
		return ""
	}
	return r.plan.Explain(r.chosen, r.failed) + fallbackNote(r.Fallbacks)
}

// Executor runs plans: it calls each target in turn until one answers,
// and relays that answer to the sink.
type Executor struct {
	cfg    ExecutorConfig
	client *http.Client
	// rt is client's transport, which attempts call directly: a provider's
	// redirect is never followed either way, and http.Client's per-request
	// work (a copy of the headers for redirects, its cancel timer) is
	// wasted on them.
	rt        http.RoundTripper
	userAgent []string // cfg.UserAgent, shared by every upstream request
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

	// charges is told of every settled cost; nil: not attributed.
	charges ChargeRecorder
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
	// Charges is told of every settled cost, for spend attribution.
	Charges ChargeRecorder
}

// NewExecutor returns an Executor with its own connection pool.
func NewExecutor(cfg ExecutorConfig, d ExecutorDeps) *Executor {
	var rt http.RoundTripper = d.Transport
	if rt == nil {
		rt = newUpstreamTransport(cfg)
	}
	e := &Executor{
		cfg: cfg,
		client: &http.Client{
			Transport: rt,
			// Never follow a redirect: it would re-send the request, and
			// an Azure api-key header with it, to wherever it points.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		rt:        rt,
		userAgent: []string{cfg.UserAgent},
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
		charges:   d.Charges,
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
	// One allocation holds the run and its first call. The Result is
	// apart: callers keep it (the node's decision log keeps the last
	// 256), and inside the run it would keep the request, its context,
	// its sink and its first call's bridge alive with it.
	res := &Result{}
	res.Attempts = res.first[:0:1] // most requests make one attempt
	r := &run{e: e, ctx: ctx, req: req, plan: plan, sink: sink, res: res}
	for i := range plan.Targets {
		if r.attempts >= e.cfg.MaxAttempts {
			break
		}
		if err := ctx.Err(); err != nil {
			r.res.ClientGone = true
			return r.res, err
		}
		if r.passOver(&plan.Targets[i]) {
			continue
		}
		c := &r.firstCall
		if c.run != nil {
			c = new(call)
		}
		c.run, c.t = r, &plan.Targets[i]
		if done, err := c.try(i); done {
			return r.res, err
		}
	}
	return r.res, r.verdict()
}

// run is one Execute: the request, its plan and sink, and what the
// attempts so far leave to decide by.
type run struct {
	e          *Executor
	ctx        context.Context
	req        *Request
	plan       *Plan
	sink       ResponseSink
	res        *Result
	failed     []string // the targets that failed, for the explanation and the error
	lastErr    error
	rateWait   time.Duration // the shortest wait a rate limit named
	farLimited bool          // a node forwarded to answered 429
	// leaseWait: a rate share was not granted in time, here or at a
	// node forwarded to (503 admission_timeout there).
	leaseWait bool
	attempts  int
	fb        fallbackState
	// charged is what the attempts that did not answer settled, in
	// nano-dollars: one a provider accepted and broke off is charged its
	// upper bound, and the answer tells it with its own (toldCost).
	charged int64
	// firstCall is the first call, kept here so that a request of one
	// attempt allocates one call state with its run.
	firstCall call
}

// call is one attempt of one target: the state its admission, the call,
// relay, whole, forward and settling share.
type call struct {
	*run
	t        *Target
	tk       Ticket
	a        attemptResult
	start    time.Time
	timer    *time.Timer // the phase's timeout: first byte, whole answer or idle gap
	timedOut atomic.Bool
	bridge   *bridge // a Responses request bridged to chat completions
}

// try admits plan.Targets[i] and, admitted, tries it; done says the
// request is over, with the error to return.
func (c *call) try(i int) (done bool, err error) {
	if rf := c.e.admit(c.ctx, c.req, c.t, &c.tk); rf != nil {
		c.refused(rf)
		return false, nil
	}
	if c.t.Via != "" {
		return c.tryVia(i)
	}
	c.res.AdmissionWait += c.tk.Waited
	c.attempts++
	c.res.plan, c.res.chosen, c.res.failed = c.plan, i, c.failed
	a := c.attempt()
	s := c.tk.Settle(a.report())
	if !a.committed {
		c.charged += costNanos(s.Cost)
	}
	if s.Cooldown > 0 {
		c.rateWait = minPositive(c.rateWait, s.Cooldown)
	}
	if a.committed {
		c.res.Usage, c.res.UsageCounted, c.res.Cost = s.Usage, a.counted, s.Cost
		c.res.Provider = c.t.Provider()
		c.res.Stored = a.stored
		if c.tk.ring != nil {
			c.res.Replica = c.t.ReplicaName()
			c.tk.Seat(c.req.Session)
		}
	}
	if done, err := c.finish(a); done {
		return true, err
	}
	c.fellBack(a)
	c.failed = append(c.failed, c.t.Provider()+" ("+a.short()+")")
	c.lastErr = ErrUpstream
	return false, nil
}

// refused records what an admission refusal leaves to decide by: a
// guard's refusal is an attempt blocked, a budget's the error to return
// unless a later target is admitted, a quota's a wait to name.
func (c *call) refused(rf *Refusal) {
	c.res.AdmissionWait += rf.Waited
	switch rf.Stage {
	case StageGuard:
		c.res.Attempts = append(c.res.Attempts, Attempt{Provider: c.t.Provider(), Outcome: OutcomeBlocked, Detail: rf.Err.Error()})
		if c.e.observer != nil {
			c.e.observer.Attempt(c.t.Provider(), OutcomeBlocked, 0)
		}
		if c.lastErr == nil {
			c.lastErr = rf.Err
		}
	case StageBudget:
		c.lastErr = rf.Err
	case StageQuota:
		c.rateWait = minPositive(c.rateWait, rf.Wait)
		c.leaseWait = c.leaseWait || rf.Lease
	}
	// Health and replica: ejected or cooled down since planning.
}

// tryVia forwards an admitted target to its via node.
func (c *call) tryVia(i int) (bool, error) {
	if c.e.forwarder == nil {
		return false, nil
	}
	c.attempts++
	c.res.plan, c.res.chosen, c.res.failed = c.plan, i, c.failed
	a := c.forward()
	if a.gone {
		c.attempts-- // a stale plan's target: not tried
		return false, nil
	}
	if done, err := c.finish(a); done {
		return true, err
	}
	c.fellBack(a)
	if a.Outcome == OutcomeRateLimited {
		c.rateWait = minPositive(c.rateWait, a.retryAfter)
		// The far node waited for its escrow or share itself: its 429
		// is its answer, not one to wait out again here.
		c.farLimited = c.farLimited || !a.farLease
	}
	c.failed = append(c.failed, c.t.Provider()+" via "+c.t.Via+" ("+a.short()+")")
	switch {
	case a.unavailable == nil:
		c.lastErr = ErrUpstream
	case c.lastErr == nil || !errors.Is(c.lastErr, ErrUpstream):
		// The far node had nothing to try: unless some provider failed,
		// that is the answer.
		c.lastErr = a.unavailable
	}
	return false, nil
}

// verdict is the error of a request no target answered.
func (r *run) verdict() error {
	switch {
	case r.fb.reply != nil:
		// No target after a refusal fallen back from answered: the client
		// sees the refusal as the provider gave it.
		return r.fb.reply
	case r.lastErr == nil && r.rateWait > 0,
		r.attempts > 0 && allRateLimited(r.res.Attempts):
		msg := "every provider tried is rate limited"
		if r.leaseWait {
			msg = "the mesh did not grant the escrow or rate share the providers tried need in time"
		}
		return &RetryAfterError{After: max(r.rateWait, time.Second), Msg: msg, Transient: !r.farLimited, Lease: r.leaseWait}
	case r.lastErr == nil:
		return fmt.Errorf("%w: every provider became unavailable while the request was planned", ErrNoProvider)
	case errors.Is(r.lastErr, ErrUpstream):
		return fmt.Errorf("%w: %s failed: %s", ErrUpstream, plural(len(r.failed), "provider", "providers"), strings.Join(r.failed, "; "))
	}
	return r.lastErr
}

// finish records an attempt and reports whether the request is done,
// with the error to return: it is when the answer reached the client,
// the client went away, or the request itself was refused.
func (c *call) finish(a *attemptResult) (bool, error) {
	res := c.res
	res.Attempts = append(res.Attempts, a.Attempt)
	if c.e.observer != nil {
		c.e.observer.Attempt(c.t.Provider(), a.Outcome, a.Duration)
	}
	if a.committed {
		res.Target = c.t
		if c.e.affinity != nil && c.req.Session != "" && a.Outcome != OutcomeCanceled {
			c.e.affinity.Remember(c.req.Session, res.Provider)
		}
	}
	switch {
	case a.Outcome == OutcomeCanceled:
		res.ClientGone = true
		if a.committed {
			return true, nil
		}
		return true, c.ctx.Err()
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
	// farLease: a node forwarded to had no lease to give it in time
	// (503 admission_timeout), which this node may wait out.
	farLease bool
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
	// stored is what a Responses answer leaves for a follow-up.
	stored *StoredResponse
	// fallback is the class of a refusal the request's group falls back
	// on (fallsBack): the request moves on instead of relaying it.
	fallback FallbackClass
}

// report is what the attempt's ticket settles.
func (a *attemptResult) report() Report {
	return Report{Outcome: a.Outcome, RetryAfter: a.retryAfter, TTFT: a.ttft, Total: a.total,
		Answered: a.answered, Known: a.known, Counted: a.counted, Usage: a.usage}
}

func (a *attemptResult) short() string {
	if a.Status != 0 && a.Status != http.StatusOK {
		return strconv.Itoa(a.Status)
	}
	return string(a.Outcome)
}

// fail marks the attempt failed with outcome o, and returns it.
func (c *call) fail(o Outcome, format string, args ...any) *attemptResult {
	c.a.Outcome = o
	c.a.Detail = c.e.redactor.Redact(fmt.Sprintf(format, args...))
	return &c.a
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
