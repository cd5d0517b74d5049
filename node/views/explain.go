package views

// Explanation is the answer of POST /v1/route/explain: the plan a request
// would get from this node now, in the order its targets would be tried,
// and why every provider serving the model was kept or dropped. Nothing is
// sent, reserved or remembered.
type Explanation struct {
	Node          string        `json:"node"`
	Tenant        string        `json:"tenant,omitempty"`
	Model         string        `json:"model"`
	Group         string        `json:"group,omitempty"`
	GroupChoice   string        `json:"group_choice,omitempty"`
	Residency     string        `json:"residency"`
	StrictTransit bool          `json:"strict_transit,omitempty"`
	Session       string        `json:"session,omitempty"`
	Policy        string        `json:"policy,omitempty"`
	PromptTokens  int           `json:"prompt_tokens_estimate"`
	OutputTokens  int           `json:"max_output_tokens"`
	Targets       []TargetView  `json:"targets"`
	Dropped       []DroppedView `json:"dropped"`
	Route         string        `json:"route,omitempty"` // X-LLMesh-Route if the first target answers
	Error         *ExplainError `json:"error,omitempty"` // what the request would get instead

	// FallbackOn are the classes of a provider's answer the group falls
	// back on (groups[].fallback_on).
	FallbackOn []string `json:"fallback_on,omitempty"`
}

// TargetView is one target of a plan.
type TargetView struct {
	Rank       int      `json:"rank"`
	Provider   string   `json:"provider"`
	Model      string   `json:"model"`
	Replica    string   `json:"replica,omitempty"`
	Via        string   `json:"via"`
	ViaRTTMs   float64  `json:"via_rtt_ms,omitempty"`
	EstCostUSD float64  `json:"est_cost_usd"`
	MaxCostUSD float64  `json:"max_cost_usd"`
	TTFTMs     float64  `json:"ttft_ms,omitempty"`
	LatencyMs  float64  `json:"latency_ms,omitempty"`
	Why        []string `json:"why"`
	// ReplicaChoice says why this replica of a provider with replicas.
	ReplicaChoice *ReplicaChoiceView `json:"replica_choice,omitempty"`
	// ContextFallback marks a target of the group's larger-context
	// models, tried only after a context_length refusal.
	ContextFallback bool `json:"context_fallback,omitempty"`
}

// ReplicaChoiceView is why a target's replica is where it is among its
// provider's.
type ReplicaChoiceView struct {
	Policy string `json:"policy"` // prefix, session, least_loaded, round_robin
	// Reason is what ordered it: predicted_ttft, session_hash,
	// prefix_hash, least_loaded or round_robin.
	Reason       string `json:"reason"`
	CachedTokens int    `json:"cached_tokens"` // expected in its prefix cache
	InFlight     int    `json:"in_flight"`     // this node's requests there
	// MaxConcurrent is its capacity, absent when unbounded.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// PredictedTTFTMs is its predicted time to first token, when
	// predicted_ttft ordered it.
	PredictedTTFTMs float64 `json:"predicted_ttft_ms,omitempty"`
	// Engine is what its engine last reported, when fresh enough to use.
	Engine *EngineView `json:"engine,omitempty"`
	// PassedOverFull is how many replicas were passed over at their
	// max_concurrent.
	PassedOverFull int `json:"passed_over_full,omitempty"`
}

// EngineView is a self-hosted replica's engine load as last reported.
type EngineView struct {
	Waiting int     `json:"waiting"`
	Running int     `json:"running"`
	KVUsage float64 `json:"kv_usage"` // 0 to 1
}

// DroppedView is a provider the plan left out.
type DroppedView struct {
	Provider  string  `json:"provider"`
	Reason    string  `json:"reason"`
	Residency bool    `json:"residency,omitempty"` // dropped to keep the data where it may go
	RetryInMs float64 `json:"retry_in_ms,omitempty"`
}

// ExplainError is the error the request would get.
type ExplainError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}
