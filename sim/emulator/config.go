package emulator

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	InputUSDPerMTok  float64 // per million prompt tokens
	OutputUSDPerMTok float64 // per million completion tokens
}

// maxCompletionTokens is the most tokens one choice may ask for, as a real
// model caps its output; beyond it a request gets 400 as OpenAI answers.
// It bounds what one non-streaming answer holds in memory.
const maxCompletionTokens = 32768

// Config is what an emulator does. Every field can be changed while it runs
// (SetConfig); a request uses the configuration current when it arrived.
type Config struct {
	// Name identifies the emulator: it seeds the completion ids and is the
	// owned_by of listed models.
	Name string
	// Latency delays the response headers of every API request, errors
	// included, measured from the request's arrival.
	Latency time.Duration
	// TTFT is the time from the response headers to the first token: the
	// first chunk of a stream, or the start of generation otherwise.
	TTFT time.Duration
	// TPS is the rate, in tokens per second per choice, of the tokens after
	// the first; 0 generates them as fast as possible.
	TPS float64
	// ErrorRate is the fraction, in [0, 1], of generating requests (chat,
	// embeddings, completions, Messages, Responses) answered 500
	// server_error after authentication and validation and before
	// generation.
	ErrorRate float64
	// RPM limits generating requests per minute with a token bucket of
	// capacity RPM refilled at RPM per minute; excess requests get 429. 0
	// means unlimited.
	RPM int
	// APIKey, when set, is required: OpenAI paths need
	// "Authorization: Bearer KEY", Azure paths "api-key: KEY", Anthropic's
	// "x-api-key: KEY" or the bearer token.
	APIKey string
	// Models lists the models served and their prices. When it is empty any
	// model is served at no charge; otherwise other models get 404
	// model_not_found.
	Models map[string]Price
	// Deployments maps an Azure deployment name to the model it reports and
	// is priced as; a deployment not listed reports its own name.
	Deployments map[string]string
	// DefaultMaxTokens is the completion length, per choice, when a request
	// gives neither max_tokens nor max_completion_tokens; 0 means 16.
	DefaultMaxTokens int
	// Seed makes the generated text, the ids and the error-rate draws a
	// function of the seed and the order in which requests arrive.
	Seed int64
	// EmbeddingDimensions is the length of the vectors an embedding model
	// returns, by model name (as reported: an Azure deployment's model);
	// a model not listed returns defaultEmbeddingDimensions (1536).
	EmbeddingDimensions map[string]int
	// NoResponses makes the emulator a server without the Responses API,
	// as vLLM-style servers are: /v1/responses and its sub-paths get 404.
	NoResponses bool
	// Engine, when set, makes the emulator an inference engine replica
	// (sim/engine; a preset such as engine.Llama8BOnH100 looks like a
	// real deployment): generating requests (all but embeddings) queue
	// for a place in the batch and KV cache blocks, the first token
	// comes once the prompt tokens not found in the prefix cache are
	// computed, and the others at the engine's steps, slower the fuller
	// the batch. TTFT and TPS are then unused (Latency still delays the
	// headers, before the request reaches the engine); a request of n
	// choices, or of several legacy prompts, runs as one sequence, as
	// long as its longest choice. Answers report the prompt
	// tokens found cached (prompt_tokens_details.cached_tokens,
	// input_tokens_details.cached_tokens, cache_read_input_tokens), and
	// GET /metrics the engine's load under vLLM's names. Changing it with
	// SetConfig starts a new engine, empty, as a restarted server; the
	// requests of the old one finish there.
	Engine *EngineConfig
}

// defaultEmbeddingDimensions is the vector length of an embedding model
// not in Config.EmbeddingDimensions, text-embedding-3-small's.
const defaultEmbeddingDimensions = 1536

// maxEmbeddingDimensions bounds a model's vector length.
const maxEmbeddingDimensions = 16384

// DefaultConfig is an emulator that answers at once: no latency, no rate
// limit, no errors, any model, no key, 16-token completions.
func DefaultConfig() Config {
	return Config{Name: "emulator", DefaultMaxTokens: 16, Seed: 1}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.Latency < 0:
		return fmt.Errorf("emulator: Latency must not be negative, got %s", c.Latency)
	case c.TTFT < 0:
		return fmt.Errorf("emulator: TTFT must not be negative, got %s", c.TTFT)
	case math.IsNaN(c.TPS) || math.IsInf(c.TPS, 0) || c.TPS < 0:
		return fmt.Errorf("emulator: TPS must be a finite number of tokens per second, 0 or more, got %v", c.TPS)
	case math.IsNaN(c.ErrorRate) || c.ErrorRate < 0 || c.ErrorRate > 1:
		return fmt.Errorf("emulator: ErrorRate must be a fraction between 0 and 1, got %v", c.ErrorRate)
	case c.RPM < 0:
		return fmt.Errorf("emulator: RPM must not be negative (0 is unlimited), got %d", c.RPM)
	case c.DefaultMaxTokens < 0 || c.DefaultMaxTokens > maxCompletionTokens:
		return fmt.Errorf("emulator: DefaultMaxTokens must be between 0 (meaning 16) and %d, got %d", maxCompletionTokens, c.DefaultMaxTokens)
	}
	if c.Engine != nil {
		if err := c.Engine.Validate(); err != nil {
			return fmt.Errorf("emulator: Engine: %w", err)
		}
	}
	for name, p := range c.Models {
		if name == "" {
			return fmt.Errorf("emulator: Models has an empty model name")
		}
		if !validPrice(p.InputUSDPerMTok) || !validPrice(p.OutputUSDPerMTok) {
			return fmt.Errorf("emulator: Models[%q]: prices must be finite and not negative, got %+v", name, p)
		}
	}
	for name, d := range c.EmbeddingDimensions {
		if name == "" || d < 1 || d > maxEmbeddingDimensions {
			return fmt.Errorf("emulator: EmbeddingDimensions[%q] must be between 1 and %d, got %d", name, maxEmbeddingDimensions, d)
		}
	}
	for dep, model := range c.Deployments {
		switch {
		case dep == "" || strings.Contains(dep, "/"):
			return fmt.Errorf("emulator: Deployments: %q is not a valid deployment name", dep)
		case model == "":
			return fmt.Errorf("emulator: Deployments[%q]: the model name is empty", dep)
		case len(c.Models) > 0 && !hasKey(c.Models, model):
			return fmt.Errorf("emulator: Deployments[%q]: model %q is not in Models", dep, model)
		}
	}
	return nil
}

func validPrice(p float64) bool { return p >= 0 && !math.IsInf(p, 0) }

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// normalized returns a copy of c that shares no map with the caller, with
// defaults filled in.
func (c Config) normalized() *Config {
	c.Models = maps.Clone(c.Models)
	c.Deployments = maps.Clone(c.Deployments)
	c.EmbeddingDimensions = maps.Clone(c.EmbeddingDimensions)
	if c.Engine != nil {
		eng := *c.Engine
		c.Engine = &eng
	}
	if c.DefaultMaxTokens == 0 {
		c.DefaultMaxTokens = 16
	}
	return &c
}

// deploymentModel is the model an Azure deployment reports.
func (c *Config) deploymentModel(dep string) string {
	if m, ok := c.Deployments[dep]; ok {
		return m
	}
	return dep
}

// embeddingDimensions is the vector length of model.
func (c *Config) embeddingDimensions(model string) int {
	if d, ok := c.EmbeddingDimensions[model]; ok {
		return d
	}
	return defaultEmbeddingDimensions
}

// modelNames is the models listed: those of Models and those deployments
// report, sorted.
func (c *Config) modelNames() []string {
	var names []string
	for name := range c.Models {
		names = append(names, name)
	}
	for _, name := range c.Deployments {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// cost is what tokens of model cost; 0 for a model without a price.
func (c *Config) cost(model string, prompt, completion int) float64 {
	p := c.Models[model]
	return (float64(prompt)*p.InputUSDPerMTok + float64(completion)*p.OutputUSDPerMTok) / 1e6
}
