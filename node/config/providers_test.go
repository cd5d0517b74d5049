package config

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// openaiSection is a provider section of the kind openai the provider
// tests edit.
func openaiSection() ProviderSection {
	return ProviderSection{Name: "gpu-eu", Region: "eu-west", BaseURL: "http://10.0.1.10:8000", APIKeyEnv: "KEY",
		Limits: RateSection{RPM: 600}, Models: []ModelSection{{Name: "llama", Upstream: "meta/llama", InputUSDPerMTok: 0.05}}}
}

func TestResolveProviders(t *testing.T) {
	openai := openaiSection
	azure := func() ProviderSection {
		return ProviderSection{Name: "az", Kind: "azure", Region: "us-east", Reach: "region", Jurisdictions: []string{"us", "eu"},
			Replicas: ReplicaURLs("https://a.example", "https://b.example"), APIVersion: "2024-10-21",
			Models: []ModelSection{{Name: "gpt-4o", Deployment: "prod", MaxOutputTokens: 100}}}
	}
	with := func(ps ...ProviderSection) func(*File) { return func(f *File) { f.Providers = ps } }
	edited := func(p ProviderSection, edit func(*ProviderSection)) ProviderSection { edit(&p); return p }
	pre := []section{resolveRegions}
	testSection(t, resolveProviders, pre, []sectionCase{
		{name: "none", want: func(*Runtime) {}},
		{name: "openai and azure", edit: with(openai(), azure()), want: func(s *Runtime) {
			s.Providers = []route.Provider{
				{Name: "gpu-eu", Kind: route.KindOpenAI, Region: "eu-west", Reach: route.ReachGlobal, Jurisdictions: region.NewSet("eu"),
					BaseURL: "http://10.0.1.10:8000", APIKey: "provider-secret", RPM: 600,
					Models: []route.Model{{Name: "llama", Upstream: "meta/llama", InputUSDPerMTok: 0.05}}},
				{Name: "az", Kind: route.KindAzure, Region: "us-east", Reach: route.ReachRegion, Jurisdictions: region.NewSet("us", "eu"),
					Replicas: []string{"https://a.example", "https://b.example"}, APIVersion: "2024-10-21",
					Models: []route.Model{{Name: "gpt-4o", Deployment: "prod", MaxOutputTokens: 100}}},
			}
		}},
		{name: "names", edit: with(edited(openai(), func(p *ProviderSection) { p.Name = "" }), openai(), openai(),
			edited(openai(), func(p *ProviderSection) { p.Name = "a/b" })), err: strings.Join([]string{
			"providers[0].name: is required", `providers[2].name: "gpu-eu" is used by another provider`,
			`providers[3].name: "a/b" must be 1-64 letters, digits, '.', '_' or '-'`}, "\n")},
		{name: "kind and reach", edit: with(edited(openai(), func(p *ProviderSection) { p.Kind, p.Reach = "bedrock", "galaxy" })),
			err: "providers[0].kind: \"bedrock\" must be openai, azure, anthropic, vllm, sglang or tgi\nproviders[0].reach: \"galaxy\" must be global or region"},
		{name: "region", edit: with(edited(openai(), func(p *ProviderSection) { p.Region = "" }), edited(openai(), func(p *ProviderSection) {
			p.Name, p.Region, p.Jurisdictions = "b", "mars", []string{"EU!"}
		})), err: strings.Join([]string{"providers[0].region: is required", `providers[1].region: "mars" is not one of regions[].name`,
			`providers[1].jurisdictions[0]: "EU!" is not a valid jurisdiction`}, "\n")},
		{name: "urls", edit: with(edited(openai(), func(p *ProviderSection) { p.BaseURL = "" }), edited(openai(), func(p *ProviderSection) {
			p.Name, p.BaseURL, p.Replicas = "b", "example.com", ReplicaURLs("https://k:s@x.example")
		})), err: strings.Join([]string{"providers[0].base_url: is required (or give replicas)",
			`providers[1].base_url: "example.com" is not an absolute http(s) URL`,
			"providers[1].replicas[0]: credentials belong in api_key_env, not in the URL"}, "\n")},
		{name: "replica settings", edit: with(edited(azure(), func(p *ProviderSection) {
			p.ReplicaPolicy = "least_loaded"
			p.Replicas = []ReplicaSection{{URL: "https://a.example", Name: "a100-0", MaxConcurrent: 8}, {URL: "https://b.example"}}
		})), want: func(s *Runtime) {
			s.Providers = []route.Provider{{Name: "az", Kind: route.KindAzure, Region: "us-east", Reach: route.ReachRegion,
				Jurisdictions: region.NewSet("us", "eu"), Replicas: []string{"https://a.example", "https://b.example"},
				ReplicaNames: []string{"a100-0", ""}, ReplicaCapacity: []int{8, 0}, ReplicaPolicy: route.ReplicaLeastLoaded,
				APIVersion: "2024-10-21", Models: []route.Model{{Name: "gpt-4o", Deployment: "prod", MaxOutputTokens: 100}}}}
		}},
		{name: "bad replica settings", edit: with(edited(azure(), func(p *ProviderSection) {
			p.ReplicaPolicy = "random"
			p.Replicas = []ReplicaSection{{URL: "https://a.example", Name: "x y", MaxConcurrent: -1}, {Name: "b"}, {URL: "https://c.example", Name: "b"}}
		}), edited(openai(), func(p *ProviderSection) {
			p.Name, p.Replicas = "solo", []ReplicaSection{{URL: "https://s.example", MaxConcurrent: 4}}
		})), err: strings.Join([]string{`providers[0].replicas[0].name: "x y" must be 1-64 letters, digits, '.', '_' or '-'`,
			"providers[0].replicas[0].max_concurrent: must not be negative", "providers[0].replicas[1].url: is required",
			`providers[0].replicas[2].name: "b" names another replica`,
			`providers[0].replica_policy: "random" must be prefix, session, least_loaded or round_robin`,
			"providers[1].replicas: max_concurrent is for providers of two replicas or more (one server bounds its own, as vLLM's --max-num-seqs does)"}, "\n")},
		{name: "key", edit: with(edited(openai(), func(p *ProviderSection) { p.APIKeyEnv = "NOPE" })),
			err: "providers[0].api_key_env: environment variable NOPE is empty or unset"},
		{name: "azure only", edit: with(edited(openai(), func(p *ProviderSection) { p.APIVersion, p.Models[0].Deployment = "1", "d" })),
			err: "providers[0].api_version: is only for azure providers\nproviders[0].models[0].deployment: is only for azure providers"},
		{name: "azure needs", edit: with(edited(azure(), func(p *ProviderSection) { p.APIVersion, p.Models[0].Deployment = "", "" })),
			err: "providers[0].api_version: is required for an azure provider\nproviders[0].models[0].deployment: is required for an azure provider"},
		{name: "limits", edit: with(edited(openai(), func(p *ProviderSection) { p.Limits = RateSection{RPM: -1, TPM: -1} })),
			err: "providers[0].limits.rpm: must not be negative\nproviders[0].limits.tpm: must not be negative"},
		{name: "engine metrics", edit: with(edited(openai(), func(p *ProviderSection) { p.Kind = "vllm" }),
			edited(openai(), func(p *ProviderSection) { p.Name, p.Kind, p.MetricsPath = "b", "sglang", "off" }),
			edited(openai(), func(p *ProviderSection) { p.Name, p.MetricsPath = "c", "/stats/prometheus" })), want: func(s *Runtime) {
			base := route.Provider{Region: "eu-west", Reach: route.ReachGlobal, Jurisdictions: region.NewSet("eu"),
				BaseURL: "http://10.0.1.10:8000", APIKey: "provider-secret", RPM: 600,
				Models: []route.Model{{Name: "llama", Upstream: "meta/llama", InputUSDPerMTok: 0.05}}}
			a, b, c := base, base, base
			a.Name, a.Kind, a.MetricsPath = "gpu-eu", route.KindVLLM, "/metrics"
			b.Name, b.Kind = "b", route.KindSGLang
			c.Name, c.Kind, c.MetricsPath = "c", route.KindOpenAI, "/stats/prometheus"
			s.Providers = []route.Provider{a, b, c}
		}},
		{name: "engine metrics path", edit: with(edited(openai(), func(p *ProviderSection) { p.MetricsPath = "metrics" })),
			err: `providers[0].metrics_path: "metrics" must be a path starting with /, or off`},
		{name: "no models", edit: with(edited(openai(), func(p *ProviderSection) { p.Models = nil })),
			err: "providers[0].models: at least one model is required"},
		{name: "models", edit: with(edited(openai(), func(p *ProviderSection) {
			p.Models = []ModelSection{{}, {Name: "m", InputUSDPerMTok: -1, OutputUSDPerMTok: -1, CachedInputUSDPerMTok: new(-0.5), MaxOutputTokens: -1}, {Name: "m"}}
		})), err: strings.Join([]string{"providers[0].models[0].name: is required",
			"providers[0].models[1].input_usd_per_mtok: must not be negative", "providers[0].models[1].output_usd_per_mtok: must not be negative",
			"providers[0].models[1].cached_input_usd_per_mtok: must not be negative",
			"providers[0].models[1].max_output_tokens: must not be negative", `providers[0].models[2].name: "m" is listed twice`}, "\n")},
	})
}

// A cached price is kept as given, above the input price too, and 0 is a
// free cache, not the default.
func TestResolveProvidersCachedPrices(t *testing.T) {
	p := openaiSection()
	p.Models = []ModelSection{{Name: "a", InputUSDPerMTok: 1, CachedInputUSDPerMTok: new(0.1)},
		{Name: "b", InputUSDPerMTok: 1, CachedInputUSDPerMTok: new(0.0)}, {Name: "c", InputUSDPerMTok: 1, CachedInputUSDPerMTok: new(2.0)}}
	testSection(t, resolveProviders, []section{resolveRegions}, []sectionCase{
		{name: "cached prices", edit: func(f *File) { f.Providers = []ProviderSection{p} }, want: func(s *Runtime) {
			s.Providers = []route.Provider{{Name: "gpu-eu", Kind: route.KindOpenAI, Region: "eu-west", Reach: route.ReachGlobal, Jurisdictions: region.NewSet("eu"),
				BaseURL: "http://10.0.1.10:8000", APIKey: "provider-secret", RPM: 600,
				Models: []route.Model{{Name: "a", InputUSDPerMTok: 1, CachedInputUSDPerMTok: new(0.1)},
					{Name: "b", InputUSDPerMTok: 1, CachedInputUSDPerMTok: new(0.0)}, {Name: "c", InputUSDPerMTok: 1, CachedInputUSDPerMTok: new(2.0)}}}}
		}},
	})
}

func TestResolveGroups(t *testing.T) {
	testSection(t, resolveGroups, nil, []sectionCase{
		{name: "valid", edit: func(f *File) {
			f.Groups = []GroupSection{{Name: "auto", Members: []string{"a", "b"}, Weights: map[string]int{"a": 3},
				Tiers: []TierSection{{MaxPromptTokens: 1000, Members: []string{"a"}}}, MaxTTFT: Duration(800 * time.Millisecond)}}
		}, want: func(s *Runtime) {
			s.Groups = []route.Group{{Name: "auto", Members: []string{"a", "b"}, Weights: map[string]int{"a": 3},
				Tiers: []route.Tier{{MaxPromptTokens: 1000, Members: []string{"a"}}}, MaxTTFT: 800 * time.Millisecond}}
		}},
		{name: "bad", edit: func(f *File) {
			f.Groups = []GroupSection{{Name: "a b", Tiers: []TierSection{{MaxPromptTokens: -1}}, MaxTTFT: -1}}
		}, err: strings.Join([]string{`groups[0].name: "a b" must be 1-64 letters, digits, '.', '_' or '-'`,
			"groups[0].members: at least one model is required", "groups[0].max_ttft: must not be negative",
			"groups[0].tiers[0].max_prompt_tokens: must not be negative"}, "\n")},
		{name: "fallback", edit: func(f *File) {
			f.Groups = []GroupSection{{Name: "smart", Members: []string{"a"}, FallbackOn: []string{"content_filter", "context_length", "rate_limited", "server_error"},
				ContextFallback: []string{"a-128k"}}}
		}, want: func(s *Runtime) {
			s.Groups = []route.Group{{Name: "smart", Members: []string{"a"}, ContextFallback: []string{"a-128k"},
				FallbackOn: route.FallbackContentFilter | route.FallbackContextLength | route.FallbackRateLimited | route.FallbackServerError}}
		}},
		{name: "bad fallback", edit: func(f *File) {
			f.Groups = []GroupSection{{Name: "smart", Members: []string{"a"}, FallbackOn: []string{"content_filter", "timeout"}, ContextFallback: []string{"a-128k", ""}}}
		}, err: strings.Join([]string{`groups[0].fallback_on[1]: "timeout" must be content_filter, context_length, rate_limited or server_error`,
			"groups[0].context_fallback: needs context_length in fallback_on: it names the models a context_length refusal moves to",
			"groups[0].context_fallback[1]: is empty"}, "\n")},
	})
}
