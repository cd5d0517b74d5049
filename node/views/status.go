package views

// Status is GET /v1/mesh/status: one node's view of itself and the mesh.
type Status struct {
	Node         string `json:"node"`
	Region       string `json:"region"`
	Jurisdiction string `json:"jurisdiction"`
	Build        string `json:"build,omitempty"`
	// Phase is serving, or where a drain is: grace, finishing, settling,
	// leaving, stopped.
	Phase    string `json:"phase"`
	Ready    bool   `json:"ready"`
	InFlight int64  `json:"in_flight"`
	// Role is voter or member (a node that leases from the voters), and
	// Raft the voter's Raft state (Leader, Follower, Candidate).
	Role   string `json:"role"`
	Raft   string `json:"raft,omitempty"`
	Leader string `json:"leader"` // "" when none is known
	// LedgerVersion is the version of the ledger's state machine the
	// voters agreed on: what every replica reads. Absent without a
	// ledger, or when no voter told it.
	LedgerVersion *int `json:"ledger_version,omitempty"`
	// Members counts the mesh's members by state (alive, draining,
	// suspect, failed, left).
	Members map[string]int `json:"members"`
	// Providers are those this node's planner sees healthy, and Unhealthy
	// the rest (ejected or cooling down after a 429).
	Providers []string `json:"healthy_providers"`
	Unhealthy []string `json:"unhealthy_providers"`
	// Leases are the budget leases and rate shares this node holds.
	Leases     []LeaseInfo     `json:"budget_leases"`
	RateShares []RateShareInfo `json:"rate_shares"`
	// Admission is this node's admission queue.
	Admission AdmissionInfo `json:"admission"`
	UptimeSec float64       `json:"uptime_s"`
}

// AdmissionInfo is how requests wait for budget escrow or a rate share on
// a node: how many wait now, and how many did since it started and for
// how long in all.
type AdmissionInfo struct {
	Waiting    int     `json:"waiting"`
	Waited     int64   `json:"waited_total"`
	WaitedSec  float64 `json:"waited_seconds_total"`
	MaxWaitSec float64 `json:"max_wait_s"` // limits.admission_wait
	QueueLimit int     `json:"queue_limit"`
}

// LeaseInfo is a budget lease this node holds.
type LeaseInfo struct {
	Tenant      string  `json:"tenant"`
	Period      string  `json:"period"`
	GrantedUSD  float64 `json:"granted_usd"`
	SpentUSD    float64 `json:"spent_usd"`
	InflightUSD float64 `json:"inflight_usd"`
	ExpiresSec  float64 `json:"expires_in_s"`
}

// RateShareInfo is this node's share of a provider's mesh-wide rate, per
// minute (-1: unlimited).
type RateShareInfo struct {
	Provider string  `json:"provider"`
	RPM      float64 `json:"rpm"`
	TPM      float64 `json:"tpm"`
	// Spare is what is left of it in the current window, in requests
	// (gossiped: peers whose share is spent forward here); -1 unknown.
	Spare int `json:"spare"`
}
