package views

// Series is GET /v1/mesh/series: a node's last minutes of traffic as
// per-second samples, the oldest first and the last at End. Requests are
// counted by the node their client called (a forwarded request once, at
// its origin), so that the series of every node add up to the mesh's.
// A key without traffic in the window is left out, and so is a sample
// array that is all zero.
type Series struct {
	// End is the Unix second of the last sample; Seconds the number of
	// samples in each array.
	End     int64 `json:"end_unix"`
	Seconds int   `json:"seconds"`
	// Providers are keyed by the provider that served (Refused: no
	// provider did), Tenants by tenant, Forwards by the node a request
	// was forwarded to.
	Providers map[string]Samples `json:"providers"`
	Tenants   map[string]Samples `json:"tenants"`
	Forwards  map[string]Samples `json:"forwards"`
}

// Refused keys, in Series.Providers, the requests no provider served.
const Refused = "(refused)"

// Samples are one key's per-second samples. Means are sums over counts:
// the mean latency of a second is LatencyMsSum/Requests, its mean TTFT
// TTFTMsSum/TTFTCount (streams only), its prompt cache hit ratio
// CachedTokens/PromptTokens.
type Samples struct {
	Requests     []int     `json:"requests,omitempty"`
	Errors       []int     `json:"errors,omitempty"` // answered with a status of 400 or more
	LatencyMsSum []float64 `json:"latency_ms_sum,omitempty"`
	TTFTCount    []int     `json:"ttft_count,omitempty"`
	TTFTMsSum    []float64 `json:"ttft_ms_sum,omitempty"`
	CostUSD      []float64 `json:"cost_usd,omitempty"`
	// PromptTokens and CachedTokens are the prompt tokens of answers
	// whose provider reported usage, and those of them it served from
	// its prompt cache.
	PromptTokens []int `json:"prompt_tokens,omitempty"`
	CachedTokens []int `json:"cached_tokens,omitempty"`
}

// Observation is what one node reports of itself for the dashboard: its
// last decisions, its rate shares and its series. Error says why a peer
// could not be read (the rest is then empty).
type Observation struct {
	Node       string          `json:"node"`
	Region     string          `json:"region"`
	Error      string          `json:"error,omitempty"`
	Decisions  []Decision      `json:"decisions"`
	RateShares []RateShareInfo `json:"rate_shares"`
	Series     Series          `json:"series"`
}

// MeshObservation is GET /v1/mesh/observe: every node's observation,
// gathered by the node that answers (Node) over the mesh's gRPC links,
// and the mesh's series, the sum of theirs.
type MeshObservation struct {
	Node   string        `json:"node"`
	Nodes  []Observation `json:"nodes"`
	Series Series        `json:"series"`
}
