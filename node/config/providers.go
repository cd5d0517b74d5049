package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// resolveProviders checks each provider and translates it into the
// catalog's input.
func resolveProviders(c *File, env Env, s *Runtime, p *problems) {
	names := map[string]bool{}
	for i, ps := range c.Providers {
		f := fmt.Sprintf("providers[%d]", i)
		if ps.Name == "" {
			p.bad(f+".name", "is required")
		} else if !nodeNamePattern.MatchString(ps.Name) {
			p.bad(f+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", ps.Name)
		} else if names[ps.Name] {
			p.bad(f+".name", "%q is used by another provider", ps.Name)
		}
		names[ps.Name] = true
		s.Providers = append(s.Providers, resolveProvider(f, &ps, s.Regions, env, p))
	}
}

// resolveProvider is one provider, f its field path.
func resolveProvider(f string, ps *ProviderSection, regions *region.Map, env Env, p *problems) route.Provider {
	rp := route.Provider{
		Name: ps.Name, Kind: route.Kind(ps.Kind), Region: ps.Region, Reach: route.Reach(ps.Reach),
		BaseURL: ps.BaseURL, APIVersion: ps.APIVersion, Priority: ps.Priority,
		RPM: ps.Limits.RPM, TPM: ps.Limits.TPM,
	}
	if rp.Kind == "" {
		rp.Kind = route.KindOpenAI
	} else if !slices.Contains(route.Kinds, rp.Kind) {
		p.bad(f+".kind", "%q must be openai, azure, anthropic, vllm, sglang or tgi", ps.Kind)
	}
	switch rp.Reach {
	case "":
		rp.Reach = route.ReachGlobal
	case route.ReachGlobal, route.ReachRegion:
	default:
		p.bad(f+".reach", "%q must be global or region", ps.Reach)
	}
	rp.Jurisdictions = providerJurisdictions(f, ps, regions, p)
	if ps.BaseURL == "" && len(ps.Replicas) == 0 {
		p.bad(f+".base_url", "is required (or give replicas)")
	}
	if ps.BaseURL != "" {
		p.url(f+".base_url", ps.BaseURL)
	}
	resolveReplicas(f, ps, &rp, p)
	p.envName(f+".api_key_env", ps.APIKeyEnv)
	if ps.APIKeyEnv != "" {
		rp.APIKey = p.secret(f+".api_key_env", ps.APIKeyEnv, env.Getenv)
	}
	if rp.Kind == route.KindAzure && ps.APIVersion == "" {
		p.bad(f+".api_version", "is required for an azure provider")
	}
	if rp.Kind != route.KindAzure && ps.APIVersion != "" {
		p.bad(f+".api_version", "is only for azure providers")
	}
	if ps.Limits.RPM < 0 {
		p.bad(f+".limits.rpm", "must not be negative")
	}
	if ps.Limits.TPM < 0 {
		p.bad(f+".limits.tpm", "must not be negative")
	}
	rp.Models = resolveModels(f, rp.Kind, ps.Models, p)
	rp.MetricsPath = metricsPath(f, rp.Kind, ps.MetricsPath, p)
	return rp
}

// resolveReplicas checks a provider's replicas and their policy.
func resolveReplicas(f string, ps *ProviderSection, rp *route.Provider, p *problems) {
	names := map[string]bool{}
	capacities := false
	for j, r := range ps.Replicas {
		rf := fmt.Sprintf("%s.replicas[%d]", f, j)
		if r.URL == "" {
			p.bad(rf+".url", "is required")
		} else {
			p.url(rf, r.URL)
		}
		if r.Name != "" && !nodeNamePattern.MatchString(r.Name) {
			p.bad(rf+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", r.Name)
		} else if names[r.Name] {
			p.bad(rf+".name", "%q names another replica", r.Name)
		}
		names[r.Name] = r.Name != ""
		if r.MaxConcurrent < 0 {
			p.bad(rf+".max_concurrent", "must not be negative")
		}
		capacities = capacities || r.MaxConcurrent > 0
		rp.Replicas = append(rp.Replicas, r.URL)
		rp.ReplicaNames = append(rp.ReplicaNames, r.Name)
		rp.ReplicaCapacity = append(rp.ReplicaCapacity, r.MaxConcurrent)
	}
	if !slices.ContainsFunc(rp.ReplicaNames, func(n string) bool { return n != "" }) {
		rp.ReplicaNames = nil
	}
	if !capacities {
		rp.ReplicaCapacity = nil
	}
	if capacities && len(ps.Replicas) < 2 {
		p.bad(f+".replicas", "max_concurrent is for providers of two replicas or more (one server bounds its own, as vLLM's --max-num-seqs does)")
	}
	if ps.ReplicaPolicy != "" {
		rp.ReplicaPolicy = route.ReplicaPolicy(ps.ReplicaPolicy)
		if !slices.Contains(route.ReplicaPolicies, rp.ReplicaPolicy) {
			p.bad(f+".replica_policy", "%q must be prefix, session, least_loaded or round_robin", ps.ReplicaPolicy)
		}
	}
}

// providerJurisdictions checks a provider's region and is where it may
// process data: the jurisdictions it lists, else its region's.
func providerJurisdictions(f string, ps *ProviderSection, regions *region.Map, p *problems) region.Set {
	reg, ok := regions.Lookup(ps.Region)
	if ps.Region == "" {
		p.bad(f+".region", "is required")
	} else if !ok {
		p.bad(f+".region", "%q is not one of regions[].name", ps.Region)
	}
	var js []region.Jurisdiction
	for j, name := range ps.Jurisdictions {
		if !region.ValidName(name) {
			p.bad(fmt.Sprintf("%s.jurisdictions[%d]", f, j), "%q is not a valid jurisdiction", name)
		}
		js = append(js, region.Jurisdiction(name))
	}
	if len(js) == 0 && ok {
		js = []region.Jurisdiction{reg.Jurisdiction}
	}
	return region.NewSet(js...)
}

// resolveModels checks the models a provider of kind serves.
func resolveModels(f string, kind route.Kind, ms []ModelSection, p *problems) []route.Model {
	if len(ms) == 0 {
		p.bad(f+".models", "at least one model is required")
	}
	var out []route.Model
	seen := map[string]bool{}
	for j, m := range ms {
		mf := fmt.Sprintf("%s.models[%d]", f, j)
		switch {
		case m.Name == "":
			p.bad(mf+".name", "is required")
		case seen[m.Name]:
			p.bad(mf+".name", "%q is listed twice", m.Name)
		}
		seen[m.Name] = true
		if m.InputUSDPerMTok < 0 {
			p.bad(mf+".input_usd_per_mtok", "must not be negative")
		}
		if m.OutputUSDPerMTok < 0 {
			p.bad(mf+".output_usd_per_mtok", "must not be negative")
		}
		var cached *float64
		if v := m.CachedInputUSDPerMTok; v != nil {
			if !(*v >= 0) || math.IsInf(*v, 1) {
				p.bad(mf+".cached_input_usd_per_mtok", "must not be negative")
			}
			cached = new(*v) // the runtime's own, not the file's
		}
		if m.MaxOutputTokens < 0 {
			p.bad(mf+".max_output_tokens", "must not be negative")
		}
		if kind == route.KindAzure && m.Deployment == "" {
			p.bad(mf+".deployment", "is required for an azure provider")
		}
		if kind != route.KindAzure && m.Deployment != "" {
			p.bad(mf+".deployment", "is only for azure providers")
		}
		api, ok := route.ParseAPI(m.API)
		if !ok || (api != route.APIChat && api != route.APIEmbeddings) {
			p.bad(mf+".api", "must be chat or embeddings; got %q", m.API)
		}
		if kind == route.KindAnthropic && api == route.APIEmbeddings {
			p.bad(mf+".api", "an anthropic provider serves no embeddings")
		}
		if api == route.APIEmbeddings && (m.OutputUSDPerMTok != 0 || m.MaxOutputTokens != 0) {
			p.bad(mf+".api", "an embeddings model has no output: leave output_usd_per_mtok and max_output_tokens unset")
		}
		out = append(out, route.Model{
			Name: m.Name, Upstream: m.Upstream, Deployment: m.Deployment,
			InputUSDPerMTok: m.InputUSDPerMTok, OutputUSDPerMTok: m.OutputUSDPerMTok, CachedInputUSDPerMTok: cached,
			MaxOutputTokens: m.MaxOutputTokens, API: api,
		})
	}
	return out
}

// resolveGroups checks the model groups' shape; what they name is
// checked against the catalog when the node builds it.
func resolveGroups(c *File, _ Env, s *Runtime, p *problems) {
	for i, g := range c.Groups {
		f := fmt.Sprintf("groups[%d]", i)
		if !nodeNamePattern.MatchString(g.Name) {
			p.bad(f+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", g.Name)
		}
		if len(g.Members) == 0 {
			p.bad(f+".members", "at least one model is required")
		}
		if g.MaxTTFT < 0 {
			p.bad(f+".max_ttft", "must not be negative")
		}
		rg := route.Group{Name: g.Name, Members: g.Members, Weights: g.Weights, MaxTTFT: time.Duration(g.MaxTTFT)}
		resolveFallback(f, g, &rg, p)
		rg.Cache = g.Cache
		for j, t := range g.Tiers {
			if t.MaxPromptTokens < 0 {
				p.bad(fmt.Sprintf("%s.tiers[%d].max_prompt_tokens", f, j), "must not be negative")
			}
			rg.Tiers = append(rg.Tiers, route.Tier{MaxPromptTokens: t.MaxPromptTokens, Members: t.Members})
		}
		s.Groups = append(s.Groups, rg)
	}
}

// metricsPath is where a provider's replicas serve their engine's
// metrics: the path given, else /metrics for a self-hosted engine's kind;
// "" for none (off, or another kind).
func metricsPath(f string, kind route.Kind, path string, p *problems) string {
	switch {
	case path == "off":
		return ""
	case path == "" && (kind == route.KindVLLM || kind == route.KindSGLang || kind == route.KindTGI):
		return "/metrics"
	case path != "" && (path[0] != '/' || strings.ContainsAny(path, "?# ")):
		p.bad(f+".metrics_path", "%q must be a path starting with /, or off", path)
	}
	return path
}
