package route

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"
)

// Group is a model name that stands for several provider models, such as
// "auto" or "cheap": the planner chooses among the members by the same
// policy as among providers. Tiers pick members by the prompt's size;
// weights split traffic between members (A/B tests, canary rollouts),
// sticky per session.
type Group struct {
	Name    string
	Members []string
	// Tiers, in order, route a prompt of up to MaxPromptTokens (0: any
	// size) to their members; the first that fits applies.
	Tiers []Tier
	// Weights split requests between members; a session always gets the
	// same member while the weights stand. Members without a weight are
	// fallbacks only.
	Weights map[string]int
	// MaxTTFT is the group's time-to-first-token objective (max_ttft):
	// a provider whose every replica is predicted to start later goes
	// after the others; zero: none. A tenant's tighter one wins.
	MaxTTFT time.Duration
	// FallbackOn are the classes of a provider's answer before the first
	// byte that move the request to the plan's next target
	// (fallback_on); 0: a refusal is relayed as it is.
	FallbackOn FallbackClass
	// ContextFallback are the larger-context models a context_length
	// refusal moves the request to (context_fallback), planned after the
	// members' providers and tried only after one.
	ContextFallback []string
	// Cache opts requests naming the group into the node's response
	// cache (cache: true).
	Cache bool
}

// Tier is one rule of a group: prompts up to MaxPromptTokens go to
// Members.
type Tier struct {
	MaxPromptTokens int
	Members         []string
}

// choose returns the members to plan with and a short account of the
// choice for X-LLMesh-Route. When weighted, the first member is the one
// the weights chose and the rest are fallbacks for when it has no
// provider left.
func (g *Group) choose(session string, promptTokens int) (members []string, weighted bool, choice string) {
	members = g.Members
	for _, t := range g.Tiers {
		if t.MaxPromptTokens == 0 || promptTokens <= t.MaxPromptTokens {
			members = t.Members
			if t.MaxPromptTokens > 0 {
				choice = fmt.Sprintf("tier up to %d prompt tokens", t.MaxPromptTokens)
			} else {
				choice = "tier for any prompt"
			}
			break
		}
	}
	if len(g.Weights) == 0 {
		return members, false, choice
	}
	total := 0
	for _, m := range members {
		total += g.Weights[m]
	}
	if total == 0 {
		return members, false, choice
	}
	var x int
	if session == "" {
		x = rand.IntN(total)
	} else {
		h := fnv.New64a()
		h.Write([]byte(g.Name))
		h.Write([]byte{0})
		h.Write([]byte(session))
		x = int(h.Sum64() % uint64(total))
	}
	for _, m := range members {
		if x -= g.Weights[m]; x < 0 {
			if choice != "" {
				choice += ", "
			}
			choice += fmt.Sprintf("%s by weight %d/%d", m, g.Weights[m], total)
			return append([]string{m}, slices.DeleteFunc(slices.Clone(members), func(s string) bool { return s == m })...), true, choice
		}
	}
	return members, false, choice
}
