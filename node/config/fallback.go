package config

import (
	"fmt"
	"strings"

	"github.com/llmesh/llmesh/route"
)

// resolveFallback checks a group's fallback_on and context_fallback (f
// names the group in messages) and sets them on rg. That the
// larger-context models are served, for the members' API, is checked
// against the catalog when the node builds it.
func resolveFallback(f string, g GroupSection, rg *route.Group, p *problems) {
	for i, name := range g.FallbackOn {
		c, ok := route.ParseFallbackClass(name)
		if !ok {
			names := route.FallbackClassNames()
			p.bad(fmt.Sprintf("%s.fallback_on[%d]", f, i), "%q must be %s or %s", name,
				strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
			continue
		}
		rg.FallbackOn |= c
	}
	if len(g.ContextFallback) > 0 && !rg.FallbackOn.Has(route.FallbackContextLength) {
		p.bad(f+".context_fallback", "needs context_length in fallback_on: it names the models a context_length refusal moves to")
	}
	for i, m := range g.ContextFallback {
		if m == "" {
			p.bad(fmt.Sprintf("%s.context_fallback[%d]", f, i), "is empty")
		}
	}
	rg.ContextFallback = g.ContextFallback
}
