package views

import "time"

// Spend is GET /v1/mesh/spend: what was spent since From, by one
// dimension (By: tenant, key, tag, model or provider), from the ledger.
// Every row is one tenant's under one name; the rows add up to the
// total. A request's cost counts once, under its tag set (by tag, a row
// is a set of tags, "(untagged)" for none).
type Spend struct {
	By     string `json:"by"`
	Tenant string `json:"tenant,omitempty"` // the one tenant asked for
	// Step is the series' buckets: hour, or day when From reaches back
	// further than hourly buckets are kept (48 hours).
	Step  string    `json:"step"`
	From  time.Time `json:"from"`  // the start of the first bucket counted
	Until time.Time `json:"until"` // the ledger's time when it answered
	// TotalUSD is the sum of the rows, TotalNanos the same in
	// nano-dollars (exact), Requests the answers charged.
	TotalUSD    float64      `json:"total_usd"`
	TotalNanos  int64        `json:"total_nanos"`
	Requests    int64        `json:"requests"`
	Rows        []SpendRow   `json:"rows"`
	Series      []SpendPoint `json:"series"`
	Consistency string       `json:"consistency"`
}

// SpendRow is one tenant's spend under one name: a key's id, a tag set,
// a model, a provider, or the tenant's own name (by tenant).
type SpendRow struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name"`
	// Label is a key's name where the ledger has one.
	Label    string  `json:"label,omitempty"`
	USD      float64 `json:"usd"`
	Nanos    int64   `json:"nanos"`
	Requests int64   `json:"requests"`
	Share    float64 `json:"share"` // of the total, 0 to 1
}

// SpendPoint is one bucket of the series: its spend, and RowsNanos[i]
// what Rows[i] spent in it.
type SpendPoint struct {
	Start     time.Time `json:"start"`
	USD       float64   `json:"usd"`
	Nanos     int64     `json:"nanos"`
	RowsNanos []int64   `json:"rows_nanos"`
}
