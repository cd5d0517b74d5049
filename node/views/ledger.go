package views

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
