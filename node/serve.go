package node

// Serving an admitted request: planning and execution (a draining node's
// hand-off first), the re-plan while a rate share is awaited, and the
// accounting every request ends with, whatever its transport.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/metrics"
	"github.com/llmesh/llmesh/node/tracing"
	"github.com/llmesh/llmesh/route"
)

// answerSink is where serve writes a request's answer: the transport's
// response, which also takes refusals in OpenAI's shape.
type answerSink interface {
	route.ResponseSink
	// written is the status written so far, 0 before any.
	written() int
}

// answer is how serve ended a request. err is what the client was
// answered with instead of a completion, if anything; status is the
// status it got (statusClientClosed when it went away).
type answer struct {
	res    *route.Result
	status int
	err    error
}

// serve admits in, plans and executes it (a draining node hands a
// client's request to a peer first), writes the answer or the refusal to
// sink, and accounts it: metrics, log, decision, audit and span.
func (n *Node) serve(ctx context.Context, in *inbound, sink answerSink) (a answer) {
	n.metrics.InFlight().Inc()
	n.inFlight.Add(1)
	defer func() {
		n.metrics.InFlight().Dec()
		n.inFlight.Add(-1)
	}()
	// The request id is the client's, or a new one: answers carry it,
	// and so do forwards and every node's log line.
	n.identify(sink.Header(), in.id)
	// The request's span, if this node traces, and the traceparent
	// providers and peers are sent.
	sp, traceparent := n.tracer.Begin(in.traceparent, in.start)
	in.traceparent = traceparent
	rt := n.rt.Load() // one catalog and its planner for the whole request, whatever a reload does
	var req *route.Request
	defer func() { n.account(n.decisionOf(in, req, rt, a), sp) }()
	req, err := n.admit(in)
	if err != nil {
		n.refuseUnreadBody(in) // refused before its body was read
		return answer{status: n.writeError(sink, err), err: err}
	}
	defer n.tenantLeave(req.Tenant)
	res, err := n.executeCached(ctx, in, req, rt, sink)
	if err != nil {
		if in.origin == fromClient {
			n.metrics.Refused(err)
		}
		return answer{res: res, status: n.writeError(sink, err), err: err}
	}
	n.keepStored(req, res)
	a = answer{res: res, status: sink.written()}
	if res.ClientGone {
		a.status = statusClientClosed
	}
	return a
}

// identify names the request (its id) and this node on an answer's
// headers h: every answer carries them, refusals included, whatever
// the endpoint.
func (n *Node) identify(h http.Header, id string) {
	// Both values in one allocation; each a one-value slice, as
	// h[k] = []string{v} would make it.
	vals := []string{n.s.Name, id}
	h["X-Llmesh-Node"] = vals[0:1:1]
	h["X-Request-Id"] = vals[1:2:2]
}

// execute plans and executes an admitted request. A client's request
// that was refused for a reason that lapses by itself is planned again
// (admitAgain) until its admission deadline; a peer's is not, as its
// sender waits itself. A draining node hands a client's request to a
// peer, and serves it itself only when none takes it.
func (n *Node) execute(ctx context.Context, in *inbound, req *route.Request, rt *routing, sink answerSink) (*route.Result, error) {
	if in.origin == fromClient && n.draining.Load() {
		// Clients and load balancers still sending here learn from
		// Connection: close and /readyz to go elsewhere; this request a
		// peer serves.
		sink.Header()["Connection"] = []string{"close"}
		if res, ok := n.handoff(ctx, req, in.body, sink); ok {
			return res, nil
		}
	}
	var waited time.Duration
	for {
		plan, err := rt.planner.Plan(req, n.now())
		var res *route.Result
		if err == nil {
			res, err = n.exec.Execute(ctx, req, plan, sink)
		}
		if err == nil {
			res.AdmissionWait += waited
			return res, nil
		}
		if in.origin == fromClient {
			if w, again := n.admitAgain(ctx, req, err); again {
				waited += w
				req.Replanned = true
				continue
			}
		}
		if res != nil {
			res.AdmissionWait += waited
		}
		return res, err
	}
}

// decisionOf is the decision record of a request that ended as a did.
func (n *Node) decisionOf(in *inbound, req *route.Request, rt *routing, a answer) decisions.Decision {
	e := decisions.Decision{At: in.start, ID: in.id, API: in.api, Tenant: in.claimed, Model: "unknown", Origin: in.sender,
		Status: a.status, Result: a.res, Err: a.err}
	if in.tenant != nil {
		e.Tenant = in.tenant.Name
	}
	if a.res != nil && a.res.Target != nil {
		e.Provider = a.res.Provider
	} else if a.res != nil && a.res.CacheHit {
		e.Provider = cacheProvider
	}
	if req != nil {
		e.Stream, e.Residency, e.Strict = req.Chat.Stream, req.Residency, req.StrictTransit
		if rt.catalog.Serves(req.Chat.Model) {
			e.Model = req.Chat.Model
		}
	}
	return e
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

// logRequest writes the request's log line. Its attributes are built in
// place (slog.Attr holds numbers and strings without boxing them), so the
// line costs the handler's work and little more.
func (n *Node) logRequest(e *decisions.Decision, via string) {
	var buf [24]slog.Attr
	attrs := append(buf[:0], slog.String("request_id", e.ID), slog.String("endpoint", e.API.String()),
		slog.String("tenant", e.Tenant), slog.String("model", e.Model), slog.Int("status", e.Status),
		slog.String("outcome", e.Outcome()), slog.Bool("stream", e.Stream), slog.Int64("ms", e.Took.Milliseconds()))
	if e.Origin != "" {
		attrs = append(attrs, slog.String("forwarded_by", e.Origin))
	}
	res := e.Result
	if res != nil && res.AdmissionWait > 0 {
		attrs = append(attrs, slog.Int64("admission_wait_ms", res.AdmissionWait.Milliseconds()))
	}
	if res != nil && res.Target != nil {
		u := res.Usage
		if res.Replica != "" {
			attrs = append(attrs, slog.String("replica", res.Replica))
		}
		attrs = append(attrs, slog.String("provider", e.Provider), slog.String("via", via),
			slog.Int("prompt_tokens", u.PromptTokens), slog.Int("cached_tokens", u.CachedTokens),
			slog.Int("completion_tokens", u.CompletionTokens), slog.Float64("cost_usd", res.Cost),
			slog.Int("attempts", len(res.Attempts)), slog.Bool("truncated", res.Truncated))
	}
	n.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// account records one finished request in metrics, the log, the recent
// decisions and its span (sp, nil when not traced). e.Err is the error
// the client was answered with, if any; e.Origin the node that forwarded
// the request here, "" when a client called this node. Tokens and cost
// count on the node that called the provider, so a forwarded request is
// not counted twice.
func (n *Node) account(e decisions.Decision, sp *tracing.Span) {
	e.Took = n.now().Sub(e.At)
	n.decided.Record(e)
	n.recordTraffic(&e)
	n.auditDecision(&e)
	res, model, provider := e.Result, e.Model, e.Provider
	n.metrics.Answered(metrics.Request{Tenant: e.Tenant, Model: model, Provider: provider, Endpoint: e.API.String(), Status: e.Status,
		Stream: e.Stream, Took: e.Took, Result: res})
	via := n.s.Name
	if res != nil && res.AdmissionWait > 0 {
		n.admitted.waited.Add(1)
		n.admitted.waitedNs.Add(int64(res.AdmissionWait))
	}
	if res != nil && res.Target != nil && res.Target.Via != "" {
		via = res.Target.Via
	}
	if n.log.Enabled(context.Background(), slog.LevelInfo) {
		n.logRequest(&e, via)
	}
	n.endSpan(sp, &e, via)
	if res != nil && n.log.Enabled(context.Background(), slog.LevelDebug) {
		for _, a := range res.Attempts {
			if a.Outcome != route.OutcomeOK {
				n.log.Debug("attempt failed", "provider", a.Provider, "outcome", a.Outcome, "status", a.Status, "detail", a.Detail, "ms", a.Duration.Milliseconds())
			}
		}
	}
}
