package route

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/region"
)

// Kind is a provider's wire dialect.
type Kind string

const (
	// KindOpenAI is OpenAI's API and every server compatible with it
	// (vLLM, TGI, llama.cpp, ...): POST {base}/v1/chat/completions with a
	// bearer key.
	KindOpenAI Kind = "openai"
	// KindAzure is Azure OpenAI: POST {base}/openai/deployments/{deployment}
	// /chat/completions?api-version=V with an api-key header.
	KindAzure Kind = "azure"
	// KindAnthropic is Anthropic's Messages API: POST {base}/v1/messages
	// with x-api-key and anthropic-version. Chat requests are translated
	// to Messages and the answers back (route/anthropic); it serves no
	// embeddings and no legacy completions.
	KindAnthropic Kind = "anthropic"
	// KindVLLM, KindSGLang and KindTGI are self-hosted engines speaking
	// OpenAI's chat completions, completions and embeddings as KindOpenAI
	// does, without the Responses API: Responses requests are bridged to
	// chat completions (route/responses).
	KindVLLM   Kind = "vllm"
	KindSGLang Kind = "sglang"
	KindTGI    Kind = "tgi"
)

// Kinds are the provider kinds a node knows, in the order docs list them.
var Kinds = []Kind{KindOpenAI, KindAzure, KindAnthropic, KindVLLM, KindSGLang, KindTGI}

// openAIShaped reports whether k is called as OpenAI's API is: the same
// paths below {base}/v1 and a bearer key.
func (k Kind) openAIShaped() bool {
	return k == KindOpenAI || k == KindVLLM || k == KindSGLang || k == KindTGI
}

// ServesResponses reports whether a provider of kind k serves OpenAI's
// Responses API itself; to the others a Responses request is bridged to
// chat completions, and the node keeps what a follow-up continues.
func (k Kind) ServesResponses() bool { return k == KindOpenAI || k == KindAzure }

// Reach says which nodes can call a provider.
type Reach string

const (
	ReachGlobal Reach = "global" // a public API any node may call
	ReachRegion Reach = "region" // only nodes of the provider's region
)

// Provider is one upstream service as configured.
type Provider struct {
	Name          string
	Kind          Kind
	Region        string
	Reach         Reach
	Jurisdictions region.Set // where it processes data
	BaseURL       string
	Replicas      []string // replica base URLs; empty means BaseURL alone
	// ReplicaNames are the replicas' configured names, in the order of
	// Replicas; a replica without one is named PROVIDER/INDEX (from 0).
	ReplicaNames []string
	APIKey       Secret
	APIVersion   string // Azure only
	Priority     int    // lower is preferred when otherwise equal
	// MetricsPath is where each replica serves its engine's metrics
	// (node/engine scrapes them); "" when none is scraped.
	MetricsPath string
	RPM, TPM    int // mesh-wide limits; 0 means none
	Models      []Model

	// ReplicaPolicy orders the replicas for each request; "" is
	// ReplicaPrefix.
	ReplicaPolicy ReplicaPolicy
	// ReplicaCapacity is each replica's max_concurrent, in the order of
	// Replicas: the requests this node keeps in flight on it at most, and
	// its weight among the replicas. 0 (or missing) is unbounded, weighed
	// as the mean of the capacities given.
	ReplicaCapacity []int

	// Ring places sessions on the replicas (bounded-load consistent
	// hashing) and counts their requests in flight; nil for a provider
	// with fewer than two replicas. Built by NewCatalog.
	Ring *Ring
	// Prefix remembers which replicas were sent which prompt prefixes,
	// for ReplicaPrefix; nil for another policy or without a Ring. Built
	// by NewCatalog.
	Prefix *PrefixIndex
	// replicaKeys name each replica for its own health tracking.
	// authName and authValue are the header carrying the key and its
	// value, made once for every upstream request (setAuth).
	authName    string
	authValue   []string
	replicaKeys []string
	// replicaNames name each replica to clients (ReplicaName).
	replicaNames []string
}

// ReplicaName is replica i's name for clients and operators: its
// configured name, else PROVIDER/INDEX; never its address.
func (p *Provider) ReplicaName(i int) string { return p.replicaNames[i] }

// Capacity is replica i's max_concurrent, 0 when unbounded.
func (p *Provider) Capacity(i int) int {
	if i < len(p.ReplicaCapacity) {
		return p.ReplicaCapacity[i]
	}
	return 0
}

// ReplicaKey names replica i of the provider for health tracking: the
// provider and the replica's base URL, so two providers sharing a server
// are still told apart.
func (p *Provider) ReplicaKey(i int) string { return p.replicaKeys[i] }

// Model is a model a provider serves, under the name clients use.
type Model struct {
	Name             string  // what clients ask for
	Upstream         string  // what the provider calls it ("" = Name)
	Deployment       string  // Azure deployment serving it
	InputUSDPerMTok  float64 // price of a million prompt tokens
	OutputUSDPerMTok float64 // price of a million completion tokens
	// CachedInputUSDPerMTok is the price of a million prompt tokens the
	// provider served from its prompt cache; nil: InputUSDPerMTok, no
	// discount (so a model built without it is never charged less).
	CachedInputUSDPerMTok *float64
	// MaxOutputTokens bounds a completion when the request gives no
	// max_tokens; it prices the worst case of such requests.
	MaxOutputTokens int
	// API is what the model serves: chat completions (the zero value) or
	// embeddings. Every provider of a model must agree.
	API API
}

// DefaultMaxOutputTokens is Model.MaxOutputTokens when not configured.
const DefaultMaxOutputTokens = 4096

// CachedInputPrice is the price of a million cached prompt tokens.
func (m *Model) CachedInputPrice() float64 {
	if m.CachedInputUSDPerMTok == nil {
		return m.InputUSDPerMTok
	}
	return *m.CachedInputUSDPerMTok
}

// Cost returns the price in USD of an answer's usage: its prompt tokens
// less the cached ones at the input price, the cached ones at the cached
// input price, its completion at the output price. Usage is cleaned
// first (Usage.Clean).
func (m *Model) Cost(u Usage) float64 {
	u = u.Clean()
	return (float64(u.PromptTokens-u.CachedTokens)*m.InputUSDPerMTok + float64(u.CachedTokens)*m.CachedInputPrice() +
		float64(u.CompletionTokens)*m.OutputUSDPerMTok) / 1e6
}

// ExpectedCost returns the price in USD of prompt tokens of which a
// fraction hit (0 to 1) is expected from the provider's cache, and of
// completion tokens: what the planner ranks by. It is no bound: a
// reservation prices the prompt uncached (Cost with no cached tokens).
func (m *Model) ExpectedCost(prompt int, hit float64, completion int) float64 {
	hit = min(max(hit, 0), 1)
	p := float64(max(prompt, 0))
	return (p*(1-hit)*m.InputUSDPerMTok + p*hit*m.CachedInputPrice() + float64(max(completion, 0))*m.OutputUSDPerMTok) / 1e6
}

// Offer is one provider serving one model, with its endpoints resolved.
type Offer struct {
	Provider *Provider
	Model    *Model
	// Endpoints holds the chat completions URL of each replica, in the
	// order of Provider.Replicas (or the single BaseURL).
	Endpoints []string
}

// UpstreamModel is the model name to put in the body sent to the provider.
func (o *Offer) UpstreamModel() string {
	if o.Model.Upstream != "" {
		return o.Model.Upstream
	}
	return o.Model.Name
}

// Catalog is the immutable set of providers and what each serves. A
// reload builds a new Catalog.
type Catalog struct {
	providers []*Provider
	byName    map[string]*Provider
	byModel   map[string][]*Offer
	models    []string
	groups    map[string]*Group
	names     []string // models and groups, sorted
}

// NewCatalog indexes providers and model groups. Field-level validation
// belongs to the configuration; NewCatalog checks only what would make
// routing ambiguous or an endpoint unbuildable.
func NewCatalog(providers []Provider, groups ...Group) (*Catalog, error) {
	c := &Catalog{byName: map[string]*Provider{}, byModel: map[string][]*Offer{}, groups: map[string]*Group{}}
	for i := range providers {
		p := &providers[i]
		if p.Name == "" {
			return nil, fmt.Errorf("providers[%d]: no name", i)
		}
		if _, dup := c.byName[p.Name]; dup {
			return nil, fmt.Errorf("providers[%d]: name %q used twice", i, p.Name)
		}
		c.byName[p.Name] = p
		c.providers = append(c.providers, p)
		bases := p.Replicas
		if len(bases) == 0 {
			bases = []string{p.BaseURL}
		}
		p.authName, p.authValue = authHeader(p)
		p.replicaKeys = make([]string, len(bases))
		p.replicaNames = make([]string, len(bases))
		for i, b := range bases {
			p.replicaKeys[i] = p.Name + " " + b
			p.replicaNames[i] = p.Name + "/" + strconv.Itoa(i)
			if i < len(p.ReplicaNames) && p.ReplicaNames[i] != "" {
				p.replicaNames[i] = p.ReplicaNames[i]
			}
		}
		if err := p.buildReplicas(bases); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for j := range p.Models {
			m := &p.Models[j]
			if seen[m.Name] {
				return nil, fmt.Errorf("provider %s: model %q listed twice", p.Name, m.Name)
			}
			seen[m.Name] = true
			if m.MaxOutputTokens == 0 {
				m.MaxOutputTokens = DefaultMaxOutputTokens
			}
			o := &Offer{Provider: p, Model: m}
			for _, b := range bases {
				ep, err := endpoint(p, m, b)
				if err != nil {
					return nil, fmt.Errorf("provider %s: %w", p.Name, err)
				}
				o.Endpoints = append(o.Endpoints, ep)
			}
			if prev := c.byModel[m.Name]; len(prev) == 0 {
				c.models = append(c.models, m.Name)
			} else if prev[0].Model.API != m.API {
				return nil, fmt.Errorf("provider %s: model %q is served for %s by %s, and for %s here", p.Name, m.Name,
					prev[0].Model.API, prev[0].Provider.Name, m.API)
			}
			c.byModel[m.Name] = append(c.byModel[m.Name], o)
		}
	}
	slices.Sort(c.models)
	c.names = slices.Clone(c.models)
	for i := range groups {
		g := &groups[i]
		if err := c.addGroup(g); err != nil {
			return nil, fmt.Errorf("groups[%d]: %w", i, err)
		}
		c.names = append(c.names, g.Name)
	}
	slices.Sort(c.names)
	return c, nil
}

// buildReplicas checks the replica settings and builds the ring (and
// the prefix index) of a provider with more than one replica.
func (p *Provider) buildReplicas(bases []string) error {
	p.Ring, p.Prefix = nil, nil
	switch {
	case len(bases) > MaxReplicas:
		return fmt.Errorf("provider %s: %d replicas, more than the %d a provider may have", p.Name, len(bases), MaxReplicas)
	case p.ReplicaPolicy != "" && !slices.Contains(ReplicaPolicies, p.ReplicaPolicy):
		return fmt.Errorf("provider %s: replica policy %q is not one of %v", p.Name, p.ReplicaPolicy, ReplicaPolicies)
	case len(p.ReplicaCapacity) > len(bases):
		return fmt.Errorf("provider %s: %d replica capacities for %d replicas", p.Name, len(p.ReplicaCapacity), len(bases))
	case slices.ContainsFunc(p.ReplicaCapacity, func(c int) bool { return c < 0 }):
		return fmt.Errorf("provider %s: a replica capacity is negative", p.Name)
	}
	if p.ReplicaPolicy == "" {
		p.ReplicaPolicy = ReplicaPrefix
	}
	if len(bases) > 1 {
		p.Ring = NewRing(bases, DefaultLoadBound)
		if p.ReplicaPolicy == ReplicaPrefix {
			p.Prefix = NewPrefixIndex(DefaultPrefixEntries, DefaultPrefixTTL)
		}
	}
	return nil
}

// Deterministic makes every ring and prefix index of c hash by a fixed
// seed, so that a seeded simulation repeats (see Ring.Deterministic).
func (c *Catalog) Deterministic() {
	for _, p := range c.providers {
		if p.Ring != nil {
			p.Ring.Deterministic()
		}
		if p.Prefix != nil {
			p.Prefix.Deterministic()
		}
	}
}

// addGroup checks a group against the models and indexes it.
func (c *Catalog) addGroup(g *Group) error {
	switch {
	case g.Name == "":
		return fmt.Errorf("no name")
	case c.byModel[g.Name] != nil:
		return fmt.Errorf("%q is also a model's name", g.Name)
	case c.groups[g.Name] != nil:
		return fmt.Errorf("name %q used twice", g.Name)
	case len(g.Members) == 0:
		return fmt.Errorf("group %q has no members", g.Name)
	}
	for _, m := range g.Members {
		if c.byModel[m] == nil {
			return fmt.Errorf("member %q is not a model any provider serves", m)
		}
		if a, b := c.byModel[m][0].Model.API, c.byModel[g.Members[0]][0].Model.API; a != b {
			return fmt.Errorf("member %q is a model for %s, and %q for %s: a group's members serve one API", m, a, g.Members[0], b)
		}
	}
	for i, t := range g.Tiers {
		if len(t.Members) == 0 {
			return fmt.Errorf("tiers[%d] has no members", i)
		}
		for _, m := range t.Members {
			if !slices.Contains(g.Members, m) {
				return fmt.Errorf("tiers[%d]: %q is not one of the group's members", i, m)
			}
		}
		if i > 0 && t.MaxPromptTokens != 0 && (g.Tiers[i-1].MaxPromptTokens == 0 || t.MaxPromptTokens <= g.Tiers[i-1].MaxPromptTokens) {
			return fmt.Errorf("tiers[%d]: max_prompt_tokens must grow from tier to tier, with any unbounded tier last", i)
		}
	}
	for m, w := range g.Weights {
		if !slices.Contains(g.Members, m) {
			return fmt.Errorf("weights: %q is not one of the group's members", m)
		}
		if w < 0 {
			return fmt.Errorf("weights: %q has a negative weight", m)
		}
	}
	if err := c.checkFallback(g); err != nil {
		return err
	}
	c.groups[g.Name] = g
	return nil
}

// endpoint returns the chat completions URL of model at base. An OpenAI
// base may name the API root with or without its /v1 ("https://api.openai.com/v1"
// as the SDKs write it, "http://gpu:8000" as vLLM is usually given).
func endpoint(p *Provider, m *Model, base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("base URL %q is not an absolute http(s) URL", base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	switch {
	case p.Kind.openAIShaped():
		if !strings.HasSuffix(u.Path, "/v1") {
			u.Path += "/v1"
		}
		u.Path += "/chat/completions"
	case p.Kind == KindAnthropic:
		u.Path = strings.TrimSuffix(u.Path, "/v1") + "/v1/messages"
	case p.Kind == KindAzure:
		if m.Deployment == "" {
			return "", fmt.Errorf("model %q has no deployment", m.Name)
		}
		u.Path += "/openai/deployments/" + m.Deployment + "/chat/completions"
		q := u.Query()
		q.Set("api-version", p.APIVersion)
		u.RawQuery = q.Encode()
	default:
		return "", fmt.Errorf("unknown kind %q", p.Kind)
	}
	return u.String(), nil
}

// Offers returns the providers serving model, in configuration order.
func (c *Catalog) Offers(model string) []*Offer { return c.byModel[model] }

// Models returns the names of every model some provider serves, sorted.
func (c *Catalog) Models() []string { return c.models }

// Names returns every name a client may ask for, models and groups,
// sorted.
func (c *Catalog) Names() []string { return c.names }

// Group returns the model group named name, or nil.
func (c *Catalog) Group(name string) *Group { return c.groups[name] }

// Serves reports whether name is a model or a group of this catalog.
func (c *Catalog) Serves(name string) bool { return c.byModel[name] != nil || c.groups[name] != nil }

// Providers returns every provider in configuration order.
func (c *Catalog) Providers() []*Provider { return c.providers }

// Provider returns the provider named name, or nil.
func (c *Catalog) Provider(name string) *Provider { return c.byName[name] }
