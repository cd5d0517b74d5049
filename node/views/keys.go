package views

// LimitsInfo are mesh-wide requests and tokens a minute; 0 is none.
type LimitsInfo struct {
	RPM int64 `json:"rpm"`
	TPM int64 `json:"tpm"`
}

// KeyInfo is one API key's own settings, named by its id, never shown.
type KeyInfo struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Models are those the key may ask for; empty: every model.
	Models       []string    `json:"models"`
	Limits       *LimitsInfo `json:"limits,omitempty"`
	BudgetUSD    *float64    `json:"budget_usd,omitempty"`
	BudgetPeriod string      `json:"budget_period,omitempty"`
	// Source is "live" (set with llmesh tenants keys, which a file no
	// longer replaces) or "file" (seeded from a configuration file).
	Source string `json:"source"`
}
