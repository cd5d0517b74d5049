package node

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/route"
)

// explain serves POST /v1/route/explain[?endpoint=API]. A tenant's key explains for that
// tenant; the admin token (or, without one, a loopback caller) may name
// any tenant with X-LLMesh-Tenant, or none for an unrestricted request.
func (n *Node) explain(w http.ResponseWriter, r *http.Request) {
	t, ok := n.tenants.Load().Authenticate(r)
	if !ok {
		allowed := false
		n.admin(func(http.ResponseWriter, *http.Request) { allowed = true })(w, r)
		if !allowed {
			return // admin wrote the refusal
		}
		if name := r.Header.Get("X-Llmesh-Tenant"); name != "" {
			if t, ok = n.tenants.Load().Named(name); !ok {
				n.writeError(w, fmt.Errorf("%w: %q", errNoSuchTenant, name))
				return
			}
		}
	}
	// ?endpoint= names the API the body is for (chat when absent).
	api, ok := route.ParseAPI(r.URL.Query().Get("endpoint"))
	if !ok || api == route.APIMessages {
		n.writeError(w, &route.InvalidRequestError{Param: "endpoint", Msg: "must be chat, embeddings, completions or responses"})
		return
	}
	req, err := n.admit(&inbound{origin: fromClient, planOnly: true, tenant: t, start: n.now(), api: api,
		pending: true, client: clientBody{w: w, rc: http.NewResponseController(w), r: r},
		session: r.Header.Get("X-Llmesh-Session"), residency: r.Header.Get("X-Llmesh-Residency")})
	if errors.Is(err, errModelNotAllowed) && req != nil {
		writeJSON(w, http.StatusOK, n.explanation(req, nil, err)) // the key's refusal is the plan
		return
	}
	if err != nil {
		n.writeError(w, err)
		return
	}
	plan, err := n.planner().Plan(req, n.now())
	writeJSON(w, http.StatusOK, n.explanation(req, plan, err))
}

// explanation renders plan, the plan made for req, or err, why there is
// none.
func (n *Node) explanation(req *route.Request, plan *route.Plan, err error) views.Explanation {
	out := views.Explanation{
		Node: n.s.Name, Tenant: req.Tenant, Model: req.Chat.Model, Residency: req.Residency.String(),
		StrictTransit: req.StrictTransit, Session: req.Session, Targets: []views.TargetView{}, Dropped: []views.DroppedView{},
	}
	if err != nil {
		status, e := n.classify(err)
		out.Error = &views.ExplainError{Status: status, Code: e.Code, Message: e.Message}
	}
	if plan == nil {
		return out
	}
	out.Group, out.GroupChoice, out.Policy = plan.Group, plan.Choice, plan.Policy
	out.FallbackOn = plan.FallbackOn.Names()
	out.PromptTokens, out.OutputTokens = plan.PromptTokens, plan.OutputTokens
	for i := range plan.Targets {
		tg := &plan.Targets[i]
		v := views.TargetView{
			Rank: i + 1, Provider: tg.Provider(), Model: tg.Offer.Model.Name, Via: tg.Via,
			EstCostUSD: tg.Cost, MaxCostUSD: tg.MaxCost, ViaRTTMs: ms(tg.ViaRTT),
			TTFTMs: ms(tg.Health.TTFT), LatencyMs: ms(tg.Health.Latency), Why: plan.Why(i), ContextFallback: tg.ContextFallback,
		}
		if v.Via == "" {
			v.Via = n.s.Name
		}
		if tg.Offer.Provider.Ring != nil && tg.Via == "" {
			v.Replica = tg.ReplicaName()
		}
		if c := plan.ReplicaChoice(i); c != nil {
			v.ReplicaChoice = replicaChoiceView(c)
		}
		out.Targets = append(out.Targets, v)
	}
	for _, s := range plan.Skipped {
		out.Dropped = append(out.Dropped, views.DroppedView{Provider: s.Provider, Reason: s.Reason, Residency: s.Residency, RetryInMs: ms(s.RetryIn)})
	}
	if len(plan.Targets) > 0 {
		out.Route = plan.Explain(0, nil)
	}
	return out
}

func replicaChoiceView(c *route.ReplicaChoice) *views.ReplicaChoiceView {
	v := &views.ReplicaChoiceView{Policy: string(c.Policy), Reason: string(c.Reason), CachedTokens: c.CachedTokens,
		InFlight: c.InFlight, MaxConcurrent: c.Capacity, PassedOverFull: c.Full}
	if c.Reason == route.ReasonPredicted {
		v.PredictedTTFTMs = ms(c.TTFT)
	}
	if c.Fresh {
		v.Engine = &views.EngineView{Waiting: c.Engine.Waiting, Running: c.Engine.Running, KVUsage: c.Engine.KVUsage}
	}
	return v
}
