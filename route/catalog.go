package route

import (
	"fmt"
	"net/url"
	"slices"
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
)

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
	APIKey        Secret
	APIVersion    string // Azure only
	Priority      int    // lower is preferred when otherwise equal
	RPM, TPM      int    // mesh-wide limits; 0 means none
	Models        []Model
}

// Model is a model a provider serves, under the name clients use.
type Model struct {
	Name             string  // what clients ask for
	Upstream         string  // what the provider calls it ("" = Name)
	Deployment       string  // Azure deployment serving it
	InputUSDPerMTok  float64 // price of a million prompt tokens
	OutputUSDPerMTok float64 // price of a million completion tokens
	// MaxOutputTokens bounds a completion when the request gives no
	// max_tokens; it prices the worst case of such requests.
	MaxOutputTokens int
}

// DefaultMaxOutputTokens is Model.MaxOutputTokens when not configured.
const DefaultMaxOutputTokens = 4096

// Cost returns the price in USD of prompt and completion tokens.
func (m *Model) Cost(prompt, completion int) float64 {
	return (float64(prompt)*m.InputUSDPerMTok + float64(completion)*m.OutputUSDPerMTok) / 1e6
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
}

// NewCatalog indexes providers. Field-level validation belongs to the
// configuration; NewCatalog checks only what would make routing ambiguous
// or an endpoint unbuildable.
func NewCatalog(providers []Provider) (*Catalog, error) {
	c := &Catalog{byName: map[string]*Provider{}, byModel: map[string][]*Offer{}}
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
			if len(c.byModel[m.Name]) == 0 {
				c.models = append(c.models, m.Name)
			}
			c.byModel[m.Name] = append(c.byModel[m.Name], o)
		}
	}
	slices.Sort(c.models)
	return c, nil
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
	switch p.Kind {
	case KindOpenAI:
		if !strings.HasSuffix(u.Path, "/v1") {
			u.Path += "/v1"
		}
		u.Path += "/chat/completions"
	case KindAzure:
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

// Providers returns every provider in configuration order.
func (c *Catalog) Providers() []*Provider { return c.providers }

// Provider returns the provider named name, or nil.
func (c *Catalog) Provider(name string) *Provider { return c.byName[name] }
