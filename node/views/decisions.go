package views

import "time"

// Decision is one routing decision in GET /v1/mesh/decisions.
type Decision struct {
	Time        time.Time `json:"time"`
	RequestID   string    `json:"request_id"`
	Endpoint    string    `json:"endpoint"` // the API: chat, embeddings
	Tenant      string    `json:"tenant"`
	Model       string    `json:"model"`
	Stream      bool      `json:"stream"`
	Provider    string    `json:"provider,omitempty"`
	Replica     string    `json:"replica,omitempty"`
	Via         string    `json:"via,omitempty"`          // the node that called the provider, when not this one
	ForwardedBy string    `json:"forwarded_by,omitempty"` // the node that sent the request here
	Status      int       `json:"status"`
	Outcome     string    `json:"outcome"`
	Millis      int64     `json:"ms"`
	CostUSD     float64   `json:"cost_usd"`
	// The answer's usage as charged: prompt tokens, those of them the
	// provider served from its prompt cache (priced at the model's
	// cached input price), and completion tokens.
	PromptTokens     int           `json:"prompt_tokens"`
	CachedTokens     int           `json:"cached_tokens"`
	CompletionTokens int           `json:"completion_tokens"`
	Attempts         []AttemptView `json:"attempts"`
	// Why is the route's explanation (as in X-LLMesh-Route), or the
	// error the request was answered with.
	Why string `json:"why"`
}

// AttemptView is one call a decision made.
type AttemptView struct {
	Provider string `json:"provider"`
	Outcome  string `json:"outcome"`
	Status   int    `json:"status,omitempty"`
	Millis   int64  `json:"ms"`
}
