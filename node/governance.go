package node

// Keys' own settings on the request path: a key's model allow-list, and
// its and its tenant's mesh-wide rate limits, taken once for a request
// at the node it entered (a forward's via node and a hand-off's peer take
// nothing again). Budgets are the executor's (route.KeyBudgetGate).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/route"
)

// errModelNotAllowed refuses a model a key may not use: 403
// model_not_allowed.
var errModelNotAllowed = errors.New("model not allowed")

// allowModel refuses, with errModelNotAllowed, a request of t's key that
// may not ask for model, and counts the refusal when count is set (a
// client's request, not an explain).
func (n *Node) allowModel(t *tenant.Tenant, model string, count bool) error {
	if t.Allows(model) {
		return nil
	}
	if count {
		n.gov.Refused(t.Name, t.KeyLabel(), "model_not_allowed")
	}
	return fmt.Errorf("%w: key %s of tenant %s may not use model %q; it may use %q (GET /v1/models lists them)",
		errModelNotAllowed, t.KeyLabel(), t.Name, model, t.Models)
}

// keyRates is the holder of keys' and tenants' rate shares: the
// ledger's, or this node's alone without one.
func (n *Node) keyRates() *consensus.RateHolder {
	if n.ledger != nil {
		return n.ledger.Subjects()
	}
	return n.localKeyRates
}

// keyRateStep bounds one wait for a key's or tenant's share: the request
// asks again after it, as a renewal or the window moving on may admit
// it.
const keyRateStep = 50 * time.Millisecond

// takeKeyRate takes, for a client's request, one request and its tokens'
// upper bound (the prompt's bound and the most the answer may hold) from
// its key's and its tenant's mesh-wide limits, and returns what it took,
// and when.
// While this node's share of either is spent the request waits in the
// admission queue (and the node asks the leader for more) until
// limits.admission_wait has passed; then it is refused 429 naming the
// key, or the tenant, and the limit.
func (n *Node) takeKeyRate(ctx context.Context, req *route.Request, rt *routing) ([]string, int, time.Time, error) {
	h := n.keyRates()
	if h == nil || !h.Limited() {
		return nil, 0, time.Time{}, nil
	}
	names := []string{consensus.TenantRate(req.Tenant)}
	if req.Key != "" {
		names = append(names, consensus.KeyRate(req.Tenant, req.Key))
	}
	tokens := tokenBound(rt.catalog, req.Chat)
	demand, waiting := true, false
	for {
		now := n.now()
		ok, wait, spent := h.TakeAll(names, tokens, now, demand)
		if ok {
			return names, tokens, now, nil
		}
		demand = false
		h.Kick()
		left := req.AdmitBy.Sub(now)
		if left <= 0 {
			return nil, 0, time.Time{}, n.keyRateRefusal(req, spent, wait, h.Pending(spent, tokens, now))
		}
		if !waiting {
			waiting = true
			n.admitted.rateWaiting.Add(1)
			defer n.admitted.rateWaiting.Add(-1)
		}
		t := time.NewTimer(min(left, keyRateStep))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, 0, time.Time{}, ctx.Err()
		case <-t.C:
		}
	}
}

// keyRateRefusal is the 429 of a request whose key's or tenant's share
// (spent) stayed spent for limits.admission_wait; or, pending, the 503
// admission_timeout of one whose share the ledger had not granted in
// that time (the mesh's slowness, not the limit).
func (n *Node) keyRateRefusal(req *route.Request, spent string, wait time.Duration, pending bool) error {
	rpm, tpm := n.keyRates().Capacity(spent)
	limit := fmt.Sprintf("%d requests a minute", rpm)
	if rpm == 0 {
		limit = fmt.Sprintf("%d tokens a minute", tpm)
	} else if tpm > 0 {
		limit += fmt.Sprintf(" and %d tokens a minute", tpm)
	}
	who, reason := "tenant "+req.Tenant, "tenant_rate_limited"
	label, shown := n.keyLabel(req)
	if spent != consensus.TenantRate(req.Tenant) {
		who, reason = fmt.Sprintf("key %s of tenant %s", shown, req.Tenant), "key_rate_limited"
	}
	if pending {
		return &route.RetryAfterError{After: max(wait, time.Second), Lease: true,
			Msg: fmt.Sprintf("the mesh has not granted this node a share of %s's limit of %s in time", who, limit)}
	}
	n.gov.Refused(req.Tenant, label, reason)
	return &route.RetryAfterError{After: max(wait, time.Second),
		Msg: fmt.Sprintf("%s is at its limit of %s across the mesh", who, limit)}
}

// settleKeyRate gives back to the shares of names the tokens a request
// took at at (tokens, its upper bound) and did not use, once its
// answer's usage is known; an answer whose usage is unknown keeps the
// bound. A request that reached no provider is given back whole.
func (n *Node) settleKeyRate(names []string, tokens int, at time.Time, res *route.Result) {
	if len(names) == 0 {
		return
	}
	if reachedNoProvider(res) {
		n.keyRates().Untake(names, tokens, at)
		return
	}
	if res.Target == nil {
		return
	}
	used := res.Usage.PromptTokens + res.Usage.CompletionTokens
	if used == 0 {
		return
	}
	now := n.now()
	for _, name := range names {
		n.keyRates().Return(name, tokens-used, now)
	}
}

// reachedNoProvider reports whether a request that ended as res (nil:
// refused before it was planned or executed) reached neither a provider
// nor a peer: no target answered and every attempt was blocked by the
// guard.
func reachedNoProvider(res *route.Result) bool {
	if res == nil {
		return true
	}
	if res.Target != nil {
		return false
	}
	for _, a := range res.Attempts {
		if a.Outcome != route.OutcomeBlocked {
			return false
		}
	}
	return true
}

// tokenBound is the most tokens chat may count: its prompt's upper
// bound and the longest answer it allows (max_tokens, else the largest
// output cap of a model it may reach).
func tokenBound(c *route.Catalog, chat *route.ChatRequest) int {
	_, prompt := chat.PromptEstimate()
	if chat.API == route.APIEmbeddings {
		return prompt
	}
	if chat.MaxTokens > 0 {
		return prompt + chat.Choices()*chat.MaxTokens
	}
	models := []string{chat.Model}
	if g := c.Group(chat.Model); g != nil {
		models = g.Members
	}
	out := 0
	for _, m := range models {
		for _, o := range c.Offers(m) {
			out = max(out, o.Model.MaxOutputTokens)
		}
	}
	return int(min(int64(prompt)+int64(chat.Choices())*int64(out), math.MaxInt32))
}

// keyBudgetRefused counts a request refused for its key's own budget.
func (n *Node) keyBudgetRefused(req *route.Request, err error) {
	if req == nil || !errors.Is(err, ledger.ErrKeyBudget) {
		return
	}
	label, _ := n.keyLabel(req)
	n.gov.Refused(req.Tenant, label, "key_budget_exceeded")
}

// keyLabel names req's key where the key itself must not appear: its
// name, else its id; shown quotes a name for a message.
func (n *Node) keyLabel(req *route.Request) (label, shown string) {
	if name := n.tenants.Load().KeyName(req.Tenant, req.Key); name != "" {
		return name, fmt.Sprintf("%q", name)
	}
	return req.Key, req.Key
}

// executeGoverned is execute within a client's request's key and
// tenant limits: their shares are taken first (takeKeyRate) and the
// tokens not used given back once it is answered; a refusal for the
// key's own budget is counted.
func (n *Node) executeGoverned(ctx context.Context, in *inbound, req *route.Request, rt *routing, sink answerSink) (*route.Result, error) {
	if in.origin != fromClient {
		return n.execute(ctx, in, req, rt, sink)
	}
	names, tokens, at, err := n.takeKeyRate(ctx, req, rt)
	if err != nil {
		return nil, err
	}
	res, err := n.execute(ctx, in, req, rt, sink)
	n.settleKeyRate(names, tokens, at, res)
	n.keyBudgetRefused(req, err)
	return res, err
}

// warnUnknownModels logs, at start, the models of keys' allow-lists in
// the file that none of catalog's providers or groups serves: not an
// error, since the ledger's lists are the mesh's and other nodes may
// serve them, but most likely a typo.
func (n *Node) warnUnknownModels(catalog *route.Catalog) {
	for i, t := range n.s.Tenants {
		for j, k := range t.KeySettings {
			for m, model := range k.Models {
				if !catalog.Serves(model) {
					n.log.Warn("a key's allow-list names a model no provider or group of this node serves",
						"field", fmt.Sprintf("tenants[%d].keys[%d].models[%d]", i, j, m), "model", model)
				}
			}
		}
	}
}
