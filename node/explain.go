package node

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// explain serves POST /v1/route/explain. A tenant's key explains for that
// tenant; the admin token (or, without one, a loopback caller) may name
// any tenant with X-LLMesh-Tenant, or none for an unrestricted request.
func (n *Node) explain(w http.ResponseWriter, r *http.Request) {
	t, ok := n.tenants.Load().authenticate(r)
	if !ok {
		allowed := false
		n.admin(func(http.ResponseWriter, *http.Request) { allowed = true })(w, r)
		if !allowed {
			return // admin wrote the refusal
		}
		if name := r.Header.Get("X-Llmesh-Tenant"); name != "" {
			if t, ok = n.tenants.Load().named(name); !ok {
				n.writeError(w, fmt.Errorf("%w: %q", errNoSuchTenant, name))
				return
			}
		}
	}
	body, err := n.readBody(w, http.NewResponseController(w), r)
	if err != nil {
		n.writeError(w, err)
		return
	}
	chat, err := route.ParseChatRequest(body)
	if err != nil {
		n.writeError(w, err)
		return
	}
	req := &route.Request{Chat: chat, Session: sessionKey(r.Header.Get("X-Llmesh-Session"))}
	if req.Session == "" {
		req.Session = sessionKey(chat.User)
	}
	if t != nil {
		req.Tenant = t.Name
		req.Residency, req.StrictTransit = n.policyOf(t)
	}
	if h := r.Header.Get("X-Llmesh-Residency"); h != "" {
		if req.Residency, err = req.Residency.Narrow(region.Jurisdiction(strings.TrimSpace(h))); err != nil {
			n.writeError(w, &route.InvalidRequestError{Param: "X-LLMesh-Residency", Msg: err.Error()})
			return
		}
	}
	out := views.Explanation{
		Node: n.s.Name, Tenant: req.Tenant, Model: chat.Model, Residency: req.Residency.String(),
		StrictTransit: req.StrictTransit, Session: req.Session, Targets: []views.TargetView{}, Dropped: []views.DroppedView{},
	}
	plan, err := n.planner().Plan(req, n.now())
	if err != nil {
		status, e := n.classify(err)
		out.Error = &views.ExplainError{Status: status, Code: e.Code, Message: e.Message}
	}
	if plan != nil {
		out.Group, out.GroupChoice, out.Policy = plan.Group, plan.Choice, plan.Policy
		out.PromptTokens, out.OutputTokens = plan.PromptTokens, plan.OutputTokens
		for i := range plan.Targets {
			tg := &plan.Targets[i]
			v := views.TargetView{
				Rank: i + 1, Provider: tg.Provider(), Model: tg.Offer.Model.Name, Via: tg.Via,
				EstCostUSD: tg.Cost, MaxCostUSD: tg.MaxCost, ViaRTTMs: ms(tg.ViaRTT),
				TTFTMs: ms(tg.Health.TTFT), LatencyMs: ms(tg.Health.Latency), Why: plan.Why(i),
			}
			if v.Via == "" {
				v.Via = n.s.Name
			}
			if tg.Offer.Provider.Ring != nil && tg.Via == "" {
				v.Replica = route.ReplicaName(tg.Endpoint())
			}
			out.Targets = append(out.Targets, v)
		}
		for _, s := range plan.Skipped {
			out.Dropped = append(out.Dropped, views.DroppedView{Provider: s.Provider, Reason: s.Reason, Residency: s.Residency, RetryInMs: ms(s.RetryIn)})
		}
		if len(plan.Targets) > 0 {
			out.Route = plan.Explain(0, nil)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
