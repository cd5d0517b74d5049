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
