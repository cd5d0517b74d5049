package views

// MemberInfo is one row of GET /v1/mesh/members.
type MemberInfo struct {
	Name         string  `json:"name"`
	Region       string  `json:"region"`
	Jurisdiction string  `json:"jurisdiction"`
	Address      string  `json:"address"`
	HTTP         string  `json:"http"`
	RPC          string  `json:"rpc,omitempty"`
	State        string  `json:"state"`
	Voter        bool    `json:"voter"`
	RTTMillis    float64 `json:"rtt_ms"` // -1 when not known yet
	Build        string  `json:"build,omitempty"`
	Self         bool    `json:"self,omitempty"`
}

// ProviderInfo is one provider in GET /v1/mesh/providers: this node's
// merged view, and each node's report.
type ProviderInfo struct {
	Name          string           `json:"name"`
	Kind          string           `json:"kind"`
	Region        string           `json:"region"`
	Reach         string           `json:"reach"`
	Jurisdictions string           `json:"jurisdictions"`
	Models        []string         `json:"models"`
	View          ProviderView     `json:"view"`
	Observers     []ObserverReport `json:"observers"`
}

// ProviderView is what this node's planner sees of a provider.
type ProviderView struct {
	Ejected        bool    `json:"ejected"`
	Degraded       bool    `json:"degraded"`
	CoolingSeconds float64 `json:"cooling_s"`
	TTFTMillis     float64 `json:"ttft_ms"`
	LatencyMillis  float64 `json:"latency_ms"`
	ErrorRate      float64 `json:"error_rate"`
	// CacheHitRatio is the share of prompt tokens the provider served
	// from its prompt cache in this node's recent answers from it, 0 to
	// 1: what the planner expects of its next prompt.
	CacheHitRatio float64 `json:"cache_hit_ratio"`
}

// ObserverReport is one node's observation of a provider.
type ObserverReport struct {
	Observer          string  `json:"observer"`
	AgeSeconds        float64 `json:"age_s"`
	TTFTMillis        float64 `json:"ttft_ms"`
	LatencyMillis     float64 `json:"latency_ms"`
	ErrorRate         float64 `json:"error_rate"`
	Ejected           bool    `json:"ejected"`
	CoolingSeconds    float64 `json:"cooling_s"`
	IdleSeconds       float64 `json:"idle_s"`
	RemainingRequests int64   `json:"remaining_requests"`
	RemainingTokens   int64   `json:"remaining_tokens"`
}
