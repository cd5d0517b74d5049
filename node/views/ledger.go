package views

import "time"

// BudgetInfo is one tenant's budget period in GET /v1/mesh/budgets.
type BudgetInfo struct {
	Tenant        string  `json:"tenant"`
	Period        string  `json:"period"`
	LimitUSD      float64 `json:"limit_usd"`
	SettledUSD    float64 `json:"settled_usd"`
	ReservedUSD   float64 `json:"reserved_usd"`
	RemainingUSD  float64 `json:"remaining_usd"`
	ForfeitedUSD  float64 `json:"forfeited_usd"`
	OverspendUSD  float64 `json:"overspend_usd"`
	Leases        int     `json:"leases"`
	ExpiredLeases int     `json:"expired_leases"`
}

// TenantInfo is one tenant in GET /v1/mesh/tenants. Keys are named by
// their id (consensus.KeyID), never shown.
type TenantInfo struct {
	Name          string   `json:"name"`
	Residency     string   `json:"residency,omitempty"`
	StrictTransit bool     `json:"strict_transit,omitempty"`
	Keys          []string `json:"keys"`
	Revoked       []string `json:"revoked"`
	BudgetUSD     *float64 `json:"budget_usd,omitempty"`
	BudgetPeriod  string   `json:"budget_period,omitempty"`
	// Limits are the tenant's mesh-wide rates; nil for none.
	Limits *LimitsInfo `json:"limits,omitempty"`
	// KeySettings are the settings of the keys that have some.
	KeySettings []KeyInfo `json:"key_settings,omitempty"`
}

// ShareInfo is one holder's share of one provider's (or key's, or
// tenant's) mesh-wide rate in GET /v1/mesh/shares.
type ShareInfo struct {
	Provider string  `json:"provider"`
	Node     string  `json:"node"` // an earlier boot's grants: node#boot
	RPM      float64 `json:"rpm"`  // the latest grant
	TPM      float64 `json:"tpm"`
	// Expires is when the latest grant's lease ends.
	Expires time.Time `json:"expires"`
	// CommittedRPM and CommittedTPM are what the holder counts against
	// the capacity now; Ghost marks an earlier boot's, which nobody can
	// use until they lapse.
	CommittedRPM float64 `json:"committed_rpm"`
	CommittedTPM float64 `json:"committed_tpm"`
	Ghost        bool    `json:"ghost,omitempty"`
}
