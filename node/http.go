package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmesh/llmesh/node/tracing"
	"github.com/llmesh/llmesh/route"
)

// routes returns the node's HTTP API.
func (n *Node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", n.only(http.MethodPost, n.chat))
	mux.HandleFunc("/v1/models", n.only(http.MethodGet, n.models))
	mux.HandleFunc("/healthz", n.only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": n.s.Name})
	}))
	mux.HandleFunc("/readyz", n.only(http.MethodGet, n.readyz))
	metrics := promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg})
	mux.HandleFunc("/metrics", n.only(http.MethodGet, metrics.ServeHTTP))
	mux.HandleFunc("/v1/mesh/members", n.only(http.MethodGet, n.admin(n.members)))
	mux.HandleFunc("/v1/mesh/providers", n.only(http.MethodGet, n.admin(n.providers)))
	mux.HandleFunc("/v1/mesh/join", n.only(http.MethodPost, n.admin(n.join)))
	mux.HandleFunc("/v1/mesh/budgets", n.only(http.MethodGet, n.admin(n.budgets)))
	mux.HandleFunc("/v1/mesh/budgets/{tenant}", n.only(http.MethodPut, n.admin(n.setBudget)))
	mux.HandleFunc("/v1/mesh/budgets/forfeit", n.only(http.MethodPost, n.admin(n.forfeit)))
	mux.HandleFunc("/v1/mesh/raft/peers", n.only(http.MethodGet, n.admin(n.raftPeers)))
	mux.HandleFunc("/v1/mesh/status", n.only(http.MethodGet, n.admin(n.status)))
	mux.HandleFunc("/v1/mesh/drain", n.only(http.MethodPost, n.admin(n.drain)))
	mux.HandleFunc("/v1/mesh/leave", n.only(http.MethodPost, n.admin(n.drain)))
	mux.HandleFunc("/v1/mesh/tenants", n.only(http.MethodGet, n.admin(n.tenantsList)))
	mux.HandleFunc("/v1/mesh/tenants/{tenant}/keys", n.only(http.MethodPost, n.admin(n.addTenantKey)))
	mux.HandleFunc("/v1/mesh/tenants/{tenant}/revoke", n.only(http.MethodPost, n.admin(n.revokeTenantKeys)))
	mux.HandleFunc("/v1/mesh/decisions", n.only(http.MethodGet, n.admin(n.decisionsHandler)))
	mux.HandleFunc("/v1/route/explain", n.only(http.MethodPost, n.explain))
	n.uiRoutes(mux)
	// Go's profiles, for the operator: CPU, heap, allocations, goroutines,
	// mutex and block (see SetMutexProfileFraction). No write deadline: a
	// CPU profile or trace takes as long as asked.
	for path, h := range map[string]http.HandlerFunc{
		"/debug/pprof/": pprof.Index, "/debug/pprof/cmdline": pprof.Cmdline, "/debug/pprof/profile": pprof.Profile,
		"/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace,
	} {
		admin := n.admin(h)
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
			admin(w, r)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(n.s.ClientWrite))
		n.writeError(w, errNotFound)
	})
	return mux
}

// only answers 405 in OpenAI's shape to methods other than method. Every
// answer is written under a write deadline of its own (the server has no
// WriteTimeout, which would cut streams): a client that does not read is
// let go, and what an earlier request on the connection left does not
// fail this one. Streams move theirs forward as they flow (httpSink).
func (n *Node) only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(n.s.ClientWrite))
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header()["Allow"] = []string{method}
			n.writeError(w, errMethod)
			return
		}
		h(w, r)
	}
}

func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	if !n.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "node": n.s.Name})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "node": n.s.Name})
}

// models lists the models this tenant may use: those with at least one
// provider its residency allows.
func (n *Node) models(w http.ResponseWriter, r *http.Request) {
	t, ok := n.tenants.Load().authenticate(r)
	if !ok {
		n.writeError(w, errUnauthorized)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	residency, _ := n.policyOf(t)
	catalog := n.catalog()
	allowed := func(name string) bool {
		for _, o := range catalog.Offers(name) {
			if residency.Allows(o.Provider.Jurisdictions) {
				return true
			}
		}
		return false
	}
	for _, name := range catalog.Names() {
		ok := allowed(name)
		if g := catalog.Group(name); g != nil {
			for _, m := range g.Members {
				ok = ok || allowed(m)
			}
		}
		if ok {
			list.Data = append(list.Data, model{ID: name, Object: "model", OwnedBy: "llmesh"})
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// chat serves POST /v1/chat/completions over the pipeline: the client's
// key authenticates the tenant, and the body is read once its tenant
// holds a place.
func (n *Node) chat(w http.ResponseWriter, r *http.Request) {
	sink := &httpSink{w: w, rc: http.NewResponseController(w), timeout: n.s.ClientWrite}
	t, ok := n.tenants.Load().authenticate(r)
	in := &inbound{origin: fromClient, tenant: t, id: requestID(r), start: n.now(),
		read:    func() ([]byte, error) { return n.readBody(w, sink.rc, r) },
		session: r.Header.Get("X-Llmesh-Session"), residency: r.Header.Get("X-Llmesh-Residency"),
		traceparent: r.Header.Get("Traceparent"), tracestate: r.Header.Get("Tracestate")}
	if !ok {
		in.authErr = errUnauthorized
	}
	n.serve(r.Context(), in, sink)
}

// admitWaitStep bounds one wait for a rate share: the request is planned
// again after it, as a share renewed or a window moved on may admit it.
const admitWaitStep = 100 * time.Millisecond

// admitAgain waits, when err refused req for a reason that lapses by
// itself (every provider over this node's rate share or cooling down), a
// step toward its admission deadline, and reports how long it waited and
// whether to plan again: a request is refused 429 only once
// limits.admission_wait has passed. Nothing was sent to the client.
func (n *Node) admitAgain(ctx context.Context, req *route.Request, err error) (time.Duration, bool) {
	var ra *route.RetryAfterError
	if !errors.As(err, &ra) || !ra.Transient {
		return 0, false
	}
	left := req.AdmitBy.Sub(n.now())
	if left <= 0 {
		return 0, false
	}
	wait := min(ra.After, left, admitWaitStep)
	t := time.NewTimer(wait)
	defer t.Stop()
	n.admitted.rateWaiting.Add(1)
	defer n.admitted.rateWaiting.Add(-1)
	select {
	case <-ctx.Done():
		return 0, false
	case <-t.C:
		return wait, true
	}
}

// parseChat decodes a chat completion request within the node's limits.
func (n *Node) parseChat(body []byte) (*route.ChatRequest, error) {
	chat, err := route.ParseChatRequest(body)
	if err != nil {
		return nil, err
	}
	if len(chat.Messages) > n.s.MaxMessages {
		return nil, &route.InvalidRequestError{Param: "messages", Msg: fmt.Sprintf("%d messages; this node takes at most %d (limits.max_messages)", len(chat.Messages), n.s.MaxMessages)}
	}
	return chat, nil
}

// tenantEnter counts a request of tenant in flight on this node, unless
// the tenant already has limits.max_concurrent_per_tenant; tenantLeave
// uncounts it.
func (n *Node) tenantEnter(tenant string) bool {
	c, ok := n.perTenant.Load(tenant)
	if !ok {
		c, _ = n.perTenant.LoadOrStore(tenant, new(atomic.Int64))
	}
	if c.(*atomic.Int64).Add(1) > int64(n.s.MaxInFlight) {
		c.(*atomic.Int64).Add(-1)
		return false
	}
	return true
}

func (n *Node) tenantLeave(tenant string) {
	if c, ok := n.perTenant.Load(tenant); ok {
		c.(*atomic.Int64).Add(-1)
	}
}

// maxPromptLog bounds a body as -log-prompts logs it.
const maxPromptLog = 64 << 10

// logPrompt logs a request's body when the node was started with
// -log-prompts, and does nothing otherwise.
func (n *Node) logPrompt(id, tenant string, body []byte) {
	if !n.logPrompts {
		return
	}
	b, cut := body, false
	if len(b) > maxPromptLog {
		b, cut = b[:maxPromptLog], true
	}
	n.log.Info("prompt", "request_id", id, "tenant", tenant, "body", string(b), "cut", cut)
}

// maxSessionKey bounds a session key as the node keeps it: longer ones
// (a session header or user field may be kilobytes) are kept as their
// SHA-256, which maps them just as well.
const maxSessionKey = 128

func sessionKey(s string) string {
	if len(s) <= maxSessionKey {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// requestID returns the client's X-Request-Id when it is a short printable
// token, else a new random one. It follows the request into the logs of
// every node it passes.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 && asciiIn(id, '!', '~') {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// asciiIn reports whether every byte of s lies in [lo, hi].
func asciiIn(s string, lo, hi byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < lo || s[i] > hi {
			return false
		}
	}
	return true
}

// readBody reads the request body within the size limit and the body read
// timeout, so neither a huge nor a trickling body can hold the node.
//
// On failure the body is closed with the expired deadline still set: the
// server then answers at once and drops the connection. Clearing the
// deadline first would let net/http wait for the rest of the body before
// answering, which a trickling client never sends.
func (n *Node) readBody(w http.ResponseWriter, rc *http.ResponseController, r *http.Request) ([]byte, error) {
	if r.ContentLength > n.s.MaxBodyBytes {
		return nil, errTooLarge
	}
	// Deadlines are on the wall clock, whatever clock the node plans with.
	_ = rc.SetReadDeadline(time.Now().Add(n.s.ReadBody))
	var buf []byte
	if r.ContentLength > 0 {
		// Sized by what is declared, up to 64 KiB: a client that declares
		// megabytes and sends nothing gets no megabytes held for it.
		buf = make([]byte, 0, min(r.ContentLength+1, 64<<10))
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, n.s.MaxBodyBytes), buf)
	if err != nil {
		_ = r.Body.Close()
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errTooLarge
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &route.InvalidRequestError{Msg: fmt.Sprintf("could not read the request body: it did not arrive within %s", n.s.ReadBody)}
		}
		return nil, &route.InvalidRequestError{Msg: "could not read the request body: the connection failed"}
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

func readAll(r io.Reader, b []byte) ([]byte, error) {
	if b == nil {
		b = make([]byte, 0, 4096)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		k, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// account records one finished request in metrics, the log, the recent
// decisions and its span (sp, nil when not traced). e.err is the error
// the client was answered with, if any; e.origin the node that forwarded
// the request here, "" when a client called this node. Tokens and cost
// count on the node that called the provider, so a forwarded request is
// not counted twice.
func (n *Node) account(e decision, sp *tracing.Span) {
	e.took = n.now().Sub(e.at)
	n.decided.record(e)
	n.auditDecision(&e)
	m, res, model, provider := n.metrics, e.res, e.model, e.provider
	m.requests.WithLabelValues(model, provider, strconv.Itoa(e.status)).Inc()
	m.duration.WithLabelValues(model, strconv.FormatBool(e.stream)).Observe(e.took.Seconds())
	attrs := []any{"request_id", e.id, "tenant", e.tenant, "model", model, "status", e.status, "outcome", outcome(e.status, res),
		"stream", e.stream, "ms", e.took.Milliseconds()}
	if e.origin != "" {
		attrs = append(attrs, "forwarded_by", e.origin)
	}
	via := n.s.Name
	if res != nil {
		m.admissionWait.Observe(res.AdmissionWait.Seconds())
		if res.AdmissionWait > 0 {
			n.admitted.waited.Add(1)
			n.admitted.waitedNs.Add(int64(res.AdmissionWait))
			attrs = append(attrs, "admission_wait_ms", res.AdmissionWait.Milliseconds())
		}
	}
	if res != nil && res.Target != nil {
		u := res.Usage
		if res.Target.Via != "" {
			via = res.Target.Via
		} else {
			m.tokens.WithLabelValues(model, provider, "prompt").Add(float64(u.PromptTokens))
			m.tokens.WithLabelValues(model, provider, "completion").Add(float64(u.CompletionTokens))
			m.cost.WithLabelValues(e.tenant, model, provider).Add(res.Cost)
		}
		if e.stream {
			m.ttft.WithLabelValues(model, provider).Observe(res.TTFT.Seconds())
		}
		if res.Truncated {
			m.truncated.WithLabelValues(provider).Inc()
		}
		if res.UsageCounted {
			m.countedTokens.WithLabelValues(provider).Inc()
		}
		if res.Replica != "" {
			attrs = append(attrs, "replica", res.Replica)
		}
		attrs = append(attrs, "provider", provider, "via", via, "prompt_tokens", u.PromptTokens,
			"completion_tokens", u.CompletionTokens, "cost_usd", res.Cost, "attempts", len(res.Attempts),
			"truncated", res.Truncated)
	}
	n.log.Info("request", attrs...)
	n.endSpan(sp, &e, via)
	if res != nil && n.log.Enabled(context.Background(), slog.LevelDebug) {
		for _, a := range res.Attempts {
			if a.Outcome != route.OutcomeOK {
				n.log.Debug("attempt failed", "provider", a.Provider, "outcome", a.Outcome, "status", a.Status, "detail", a.Detail, "ms", a.Duration.Milliseconds())
			}
		}
	}
}

// outcome sums a finished request up for its log line: ok, truncated
// (a stream cut after its first byte), client_closed, refused (a
// budget, rate or residency refusal, or a bad request), or error.
func outcome(status int, res *route.Result) string {
	switch {
	case status == statusClientClosed:
		return "client_closed"
	case status >= 200 && status < 300 && res != nil && res.Truncated:
		return "truncated"
	case status >= 200 && status < 300:
		return "ok"
	case status >= 400 && status < 500, status == http.StatusServiceUnavailable:
		return "refused"
	}
	return "error"
}

// httpSink is a route.ResponseSink over the client's HTTP response. A
// client that stops reading is cut off after clientWrite, while a stream
// that keeps flowing runs as long as it needs: the write deadline moves
// forward as the stream flows. Moving it costs a runtime timer update, so
// it moves only when it has come within three quarters of the timeout —
// the cut-off lies between 3/4 and all of clientWrite after the last
// successful write.
type httpSink struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	status   int
	deadline time.Time
}

func (s *httpSink) Header() http.Header { return s.w.Header() }

func (s *httpSink) written() int { return s.status }

func (s *httpSink) WriteHeader(status int) {
	s.status = status
	s.w.WriteHeader(status)
}

func (s *httpSink) extend() {
	now := time.Now()
	if s.deadline.Sub(now) < s.timeout*3/4 {
		s.deadline = now.Add(s.timeout)
		_ = s.rc.SetWriteDeadline(s.deadline)
	}
}

func (s *httpSink) Write(p []byte) (int, error) {
	s.extend()
	return s.w.Write(p)
}

func (s *httpSink) Flush() error {
	s.extend()
	return s.rc.Flush()
}
