package route

import (
	"fmt"
	"strings"
)

// Why says why target i is in the plan where it is: what the policy
// weighed, in a few words each.
func (plan *Plan) Why(i int) []string {
	t := &plan.Targets[i]
	var why []string
	if t.Sticky {
		why = append(why, "the session's provider (its prompt cache is warm): first while healthy")
	}
	if t.Hinted {
		why = append(why, "the forwarding node's choice: first while healthy")
	}
	if t.Health.Degraded {
		why = append(why, "failing on other nodes: ranked below healthy providers")
	}
	why = append(why, fmt.Sprintf("expected cost $%.6f (at most $%.6f)", t.Cost, t.MaxCost))
	switch {
	case t.Health.TTFT > 0:
		why = append(why, fmt.Sprintf("time to first token %dms", t.Health.TTFT.Milliseconds()))
	case t.Health.Latency > 0:
		why = append(why, fmt.Sprintf("latency %dms", t.Health.Latency.Milliseconds()))
	default:
		why = append(why, "not observed yet: counts as fast")
	}
	switch {
	case t.Spill:
		why = append(why, fmt.Sprintf("this node's rate share is spent: through node %s, which has share left (rtt %dms)", t.Via, t.ViaRTT.Milliseconds()))
	case t.Via != "":
		why = append(why, fmt.Sprintf("reachable only from region %s: through node %s (rtt %dms)", t.ViaRegion, t.Via, t.ViaRTT.Milliseconds()))
	}
	if t.Offer.Provider.Ring != nil && t.Via == "" {
		if i == 0 || plan.Targets[i-1].Offer.Provider != t.Offer.Provider {
			why = append(why, "the session's replica (bounded-load consistent hash)")
		} else {
			why = append(why, "the next replica on the ring: failover")
		}
	}
	return why
}

// Explain renders the plan for the X-LLMesh-Route header: the policy, the
// chosen target and what it beat or replaced, in one short ASCII line.
func (plan *Plan) Explain(chosen int, failed []string) string {
	var b strings.Builder
	t := &plan.Targets[chosen]
	fmt.Fprintf(&b, "policy=%s", plan.Policy)
	if plan.Group != "" {
		fmt.Fprintf(&b, "; group %s", plan.Group)
		if plan.Choice != "" {
			b.WriteString(" (" + plan.Choice + ")")
		}
	}
	fmt.Fprintf(&b, "; chose %s (est $%.6f", t.Provider(), t.Cost)
	if t.Health.TTFT > 0 {
		fmt.Fprintf(&b, ", ttft %dms", t.Health.TTFT.Milliseconds())
	}
	if t.Via != "" {
		fmt.Fprintf(&b, ", via %s", t.Via)
		if t.Spill {
			b.WriteString(": this node's rate share is spent")
		}
	}
	if t.Sticky {
		b.WriteString(", session affinity")
	}
	if t.Hinted {
		b.WriteString(", as the forwarding node planned")
	}
	if t.Health.Degraded {
		b.WriteString(", failing on other nodes")
	}
	b.WriteString(")")
	if n := len(plan.Targets) - 1; n > 0 {
		fmt.Fprintf(&b, " of %d candidates", n+1)
	}
	if len(failed) > 0 {
		b.WriteString("; failed over from " + strings.Join(failed, ", "))
	}
	for _, o := range plan.Targets[chosen+1:] {
		if o.Health.Degraded {
			b.WriteString("; ranked down " + o.Provider() + " (failing on other nodes)")
			break
		}
	}
	if len(plan.Skipped) > 0 {
		b.WriteString("; skipped ")
		for i, s := range plan.Skipped {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(s.Provider + " (" + s.Reason + ")")
		}
	}
	return b.String()
}
