package route

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// FallbackClass is a class of answer a provider gives before the first
// byte that a model group may fall back on (groups[].fallback_on): the
// request moves to the plan's next target, which the guard admits as it
// admits any retry. A set of classes is their bitwise or.
type FallbackClass uint8

const (
	// FallbackContentFilter is a provider's content filter refusing the
	// prompt: Azure OpenAI's 400 content_filter (innererror
	// ResponsibleAIPolicyViolation), OpenAI's 400 invalid_prompt for a
	// prompt flagged under its usage policy, Anthropic's 400 "Output
	// blocked by content filtering policy".
	FallbackContentFilter FallbackClass = 1 << iota
	// FallbackContextLength is a prompt longer than the model's context
	// window: OpenAI's and Azure's context_length_exceeded, vLLM's
	// "maximum context length", Anthropic's "prompt is too long", TGI's
	// 422 on inputs plus max_new_tokens. A group's ContextFallback names
	// the larger-context models to move to.
	FallbackContextLength
	// FallbackRateLimited is a 429. Every request already moves on past
	// one; listing it names the move in X-LLMesh-Route and counts it.
	FallbackRateLimited
	// FallbackServerError is a 5xx, which every request already moves
	// on past; listing it names the move and counts it.
	FallbackServerError
)

// fallbackNames are the classes' names in configuration, headers and
// metrics, in bit order.
var fallbackNames = [...]string{"content_filter", "context_length", "rate_limited", "server_error"}

// FallbackClassNames lists the names ParseFallbackClass accepts.
func FallbackClassNames() []string { return slices.Clone(fallbackNames[:]) }

// ParseFallbackClass returns the class named s.
func ParseFallbackClass(s string) (FallbackClass, bool) {
	if i := slices.Index(fallbackNames[:], s); i >= 0 {
		return 1 << i, true
	}
	return 0, false
}

// Has reports whether the set c holds every class of x.
func (c FallbackClass) Has(x FallbackClass) bool { return x != 0 && c&x == x }

// Names returns the names of the classes in the set c, in bit order.
func (c FallbackClass) Names() []string {
	var out []string
	for i, name := range fallbackNames {
		if c&(1<<i) != 0 {
			out = append(out, name)
		}
	}
	return out
}

// String names the set's classes, comma-separated.
func (c FallbackClass) String() string { return strings.Join(c.Names(), ",") }

// Fallback is one move of a request past a provider's answer of a class
// its group falls back on.
type Fallback struct {
	Class    FallbackClass
	Provider string
}

// String is how X-LLMesh-Route says it: "content_filter from azure-eu".
func (f Fallback) String() string { return f.Class.String() + " from " + f.Provider }

// fallbackNote is what X-LLMesh-Route adds for the fallbacks a request
// took: "; fallback: content_filter from azure-eu".
func fallbackNote(fs []Fallback) string {
	if len(fs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("; fallback: ")
		b.WriteString(f.String())
	}
	return b.String()
}

// maxClassifiedBody bounds what of an error body is classified: the
// attempt reads at most this much of it anyway.
const maxClassifiedBody = 64 << 10

// refusalClass classifies a provider's refusal of the request, its
// status (400, 413 or 422) and error body as the executor holds it (an
// Anthropic provider's already in OpenAI's shape, its message kept): a
// content filter, a context window exceeded, or neither (0). Only the
// error's code, its inner error's code and its message are read.
func refusalClass(status int, body []byte) FallbackClass {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge && status != http.StatusUnprocessableEntity {
		return 0
	}
	if len(body) > maxClassifiedBody {
		body = body[:maxClassifiedBody]
	}
	var doc struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"` // vLLM's, at the top level
	}
	if json.Unmarshal(body, &doc) != nil {
		return 0
	}
	var e struct {
		Code       json.RawMessage `json:"code"` // a string, or vLLM's status number
		Message    string          `json:"message"`
		InnerError struct {
			Code string `json:"code"`
		} `json:"innererror"`
	}
	msg := doc.Message
	if s := bytes.TrimSpace(doc.Error); len(s) > 0 && s[0] == '"' {
		_ = json.Unmarshal(s, &msg) // TGI's {"error": "Input validation error: ..."}
	} else if len(s) > 0 && json.Unmarshal(s, &e) == nil {
		msg = e.Message
	}
	var code string
	_ = json.Unmarshal(e.Code, &code)
	msg = strings.ToLower(msg)
	switch {
	case code == "content_filter", e.InnerError.Code == "ResponsibleAIPolicyViolation", code == "content_policy_violation",
		code == "invalid_prompt" && strings.Contains(msg, "usage policy"),
		strings.Contains(msg, "content filtering policy"), strings.Contains(msg, "content management policy"):
		return FallbackContentFilter
	case code == "context_length_exceeded", strings.Contains(msg, "maximum context length"),
		strings.Contains(msg, "prompt is too long"), strings.Contains(msg, "exceed context limit"),
		strings.Contains(msg, "context window"), strings.Contains(msg, "max_new_tokens` must be <="):
		return FallbackContextLength
	}
	return 0
}

// outcomeClass is the class of an attempt that failed without a refusal:
// a 429 (the provider's or a via node's), or a 5xx.
func outcomeClass(a *attemptResult) FallbackClass {
	switch {
	case a.Outcome == OutcomeRateLimited:
		return FallbackRateLimited
	case a.Outcome == OutcomeHTTPError && a.Status >= 500 && a.unavailable == nil:
		return FallbackServerError
	}
	return 0
}

// fallbackState is what the fallbacks a request took leave to decide
// its next targets and its answer by.
type fallbackState struct {
	// reply is the first refusal fallen back from: the client gets it as
	// it was when no later target answers.
	reply *UpstreamReply
	// refusedBy are the offers (a provider's model) that refused the
	// request with a class fallen back on: their other targets (replicas,
	// via nodes) would refuse it again.
	refusedBy []*Offer
	// context means a provider refused the prompt as too long: the
	// group's larger-context models are open, and when it names some
	// only they are tried.
	context bool
}

// fallsBack reports whether the refusal r is of a class the request's
// group falls back on; if so the attempt records its class, and the
// request moves on instead of relaying it.
func (c *call) fallsBack(r *UpstreamReply) bool {
	cl := refusalClass(r.Status, r.Body)
	if !c.plan.FallbackOn.Has(cl) {
		return false
	}
	c.a.fallback = cl
	if c.fb.reply == nil {
		c.fb.reply = r
	}
	return true
}

// fellBack records a failed attempt's move to the next target when its
// class is one the group falls back on.
func (c *call) fellBack(a *attemptResult) {
	cl := a.fallback
	if cl == 0 {
		cl = outcomeClass(a)
	}
	if !c.plan.FallbackOn.Has(cl) {
		return
	}
	c.res.Fallbacks = append(c.res.Fallbacks, Fallback{Class: cl, Provider: c.t.Provider()})
	if a.fallback != 0 {
		c.fb.refusedBy = append(c.fb.refusedBy, c.t.Offer)
	}
	if cl == FallbackContextLength {
		c.fb.context = true
	}
}

// passOver reports whether t is not to be tried after the fallbacks so
// far: a larger-context target before any context_length refusal, the
// group's other targets after one when it names larger-context models,
// and any other target of a provider's model that refused the request.
func (r *run) passOver(t *Target) bool {
	switch {
	case t.ContextFallback && !r.fb.context:
		return true
	case !t.ContextFallback && r.fb.context && r.plan.hasContextFallback():
		return true
	}
	return slices.Contains(r.fb.refusedBy, t.Offer)
}

// hasContextFallback reports whether the plan holds larger-context
// targets.
func (plan *Plan) hasContextFallback() bool {
	n := len(plan.Targets)
	return n > 0 && plan.Targets[n-1].ContextFallback
}

// planContextFallback appends, after the plan's targets, those of the
// larger-context models the request's group names for a context_length
// refusal (Target.ContextFallback), filtered as every target is and in
// the policy's order among themselves. They are tried only after such a
// refusal.
func (p *Planner) planContextFallback(req *Request, plan *Plan, policy Policy, sticky string, now time.Time) {
	if len(plan.contextModels) == 0 {
		return
	}
	var offers []*Offer
	for _, m := range plan.contextModels {
		offers = append(offers, p.Catalog.Offers(m)...)
	}
	first := len(plan.Targets)
	p.planOffers(req, plan, offers, sticky, now)
	added := plan.Targets[first:]
	for i := range added {
		added[i].ContextFallback = true
	}
	sort.Stable(byPolicy{req, policy, added})
}

// checkFallback checks a group's fallback settings against the catalog:
// its larger-context models are served, for its members' API, and are
// named only with context_length among the classes.
func (c *Catalog) checkFallback(g *Group) error {
	if len(g.ContextFallback) == 0 {
		return nil
	}
	if !g.FallbackOn.Has(FallbackContextLength) {
		return fmt.Errorf("context_fallback needs context_length in fallback_on")
	}
	for _, m := range g.ContextFallback {
		if c.byModel[m] == nil {
			return fmt.Errorf("context_fallback: %q is not a model any provider serves", m)
		}
		if a, b := c.byModel[m][0].Model.API, c.byModel[g.Members[0]][0].Model.API; a != b {
			return fmt.Errorf("context_fallback: %q is a model for %s, and the group's members are for %s", m, a, b)
		}
	}
	return nil
}
