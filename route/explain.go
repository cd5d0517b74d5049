package route

import (
	"fmt"
	"strconv"
	"strings"
)

// Why says why target i is in the plan where it is: what the policy
// weighed, in a few words each.
func (plan *Plan) Why(i int) []string {
	t := &plan.Targets[i]
	var why []string
	if t.ContextFallback {
		why = append(why, "a larger-context model of the group: tried only after a provider refuses the prompt as too long (context_length)")
	}
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
	if h := t.Health.CacheHit; h > 0 {
		why = append(why, fmt.Sprintf("%.0f%% of the prompt expected from the provider's cache, as in its recent answers", 100*h))
	}
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
	if t.OverTTFT != "" {
		why = append(why, t.OverTTFT+": after the providers predicted within it")
	}
	if c := plan.ReplicaChoice(i); c != nil {
		first := i == 0 || plan.Targets[i-1].Offer.Provider != t.Offer.Provider
		why = append(why, c.why(t.ReplicaName(), first))
	}
	return why
}

// why says in a few words why replica name is where it is: first among
// its provider's, or next in the same order.
func (c *ReplicaChoice) why(name string, first bool) string {
	var b strings.Builder
	if first {
		fmt.Fprintf(&b, "replica %s (policy %s): ", name, c.Policy)
	} else {
		fmt.Fprintf(&b, "failover to replica %s: ", name)
	}
	switch c.Reason {
	case ReasonPredicted:
		fmt.Fprintf(&b, "predicted time to first token %dms", c.TTFT.Milliseconds())
		if first {
			b.WriteString(", the lowest")
		}
	case ReasonSession:
		b.WriteString("the session's bounded-load consistent hash; nothing known of prefixes or load")
	case ReasonPrefixHash:
		b.WriteString("the consistent hash of the prompt's first chunk; nothing known of prefixes or load")
	case ReasonLeastLoaded:
		b.WriteString("fewest requests in flight for its capacity")
	case ReasonRoundRobin:
		b.WriteString("next in rotation")
	}
	fmt.Fprintf(&b, " (%d cached prompt tokens expected, %d in flight here", c.CachedTokens, c.InFlight)
	if c.Capacity > 0 {
		fmt.Fprintf(&b, " of max_concurrent %d", c.Capacity)
	}
	if c.Fresh {
		fmt.Fprintf(&b, "; engine: %d waiting, %d running, KV cache %.0f%% used", c.Engine.Waiting, c.Engine.Running, 100*c.Engine.KVUsage)
	}
	b.WriteString(")")
	if first && c.Full > 0 {
		fmt.Fprintf(&b, "; passed over %d replica(s) at max_concurrent", c.Full)
	}
	return b.String()
}

// Explain renders the plan for the X-LLMesh-Route header: the policy, the
// chosen target and what it beat or replaced, in one short ASCII line.
func (plan *Plan) Explain(chosen int, failed []string) string {
	var b strings.Builder
	b.Grow(256) // the usual line in one allocation
	var num [24]byte
	t := &plan.Targets[chosen]
	b.WriteString("policy=")
	b.WriteString(string(plan.Policy))
	if plan.Group != "" {
		fmt.Fprintf(&b, "; group %s", plan.Group)
		if plan.Choice != "" {
			b.WriteString(" (" + plan.Choice + ")")
		}
	}
	b.WriteString("; chose ")
	b.WriteString(t.Provider())
	b.WriteString(" (est $")
	b.Write(strconv.AppendFloat(num[:0], t.Cost, 'f', 6, 64))
	if t.Health.TTFT > 0 {
		b.WriteString(", ttft ")
		b.Write(strconv.AppendInt(num[:0], t.Health.TTFT.Milliseconds(), 10))
		b.WriteString("ms")
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
	if c := plan.ReplicaChoice(chosen); c != nil {
		fmt.Fprintf(&b, ", replica %s by %s: %d cached tokens, %d in flight", t.ReplicaName(), c.Policy, c.CachedTokens, c.InFlight)
		if c.Reason == ReasonPredicted {
			fmt.Fprintf(&b, ", ttft~%dms", c.TTFT.Milliseconds())
		}
		if c.Full > 0 {
			fmt.Fprintf(&b, ", %d full", c.Full)
		}
	}
	if t.OverTTFT != "" {
		b.WriteString(", " + t.OverTTFT + " with no other provider within it")
	}
	b.WriteString(")")
	if n := len(plan.Targets) - 1; n > 0 {
		b.WriteString(" of ")
		b.Write(strconv.AppendInt(num[:0], int64(n+1), 10))
		b.WriteString(" candidates")
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
	spilled := ""
	for _, o := range plan.Targets[chosen+1:] {
		if o.OverTTFT != "" && o.Provider() != spilled && o.Provider() != t.Provider() {
			spilled = o.Provider()
			b.WriteString("; " + spilled + " " + o.OverTTFT)
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
