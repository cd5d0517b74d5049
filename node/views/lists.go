package views

// The admin API's list answers: each wraps its rows in an object.
// Fields are in the order of their JSON names.

// Members is GET /v1/mesh/members.
type Members struct {
	Members []MemberInfo `json:"members"`
}

// Providers is GET /v1/mesh/providers: the answering node's view.
type Providers struct {
	Node      string         `json:"node"`
	Providers []ProviderInfo `json:"providers"`
}

// Budgets is GET /v1/mesh/budgets, read with the consistency asked for
// (linearizable or stale).
type Budgets struct {
	Budgets     []BudgetInfo `json:"budgets"`
	Consistency string       `json:"consistency"`
}

// Tenants is GET /v1/mesh/tenants.
type Tenants struct {
	Tenants []TenantInfo `json:"tenants"`
}

// Decisions is GET /v1/mesh/decisions: the answering node's last
// routing decisions, newest first.
type Decisions struct {
	Decisions []Decision `json:"decisions"`
	Node      string     `json:"node"`
}

// Shares is GET /v1/mesh/shares: the ledger's rate shares, by provider
// and holder.
type Shares struct {
	Shares      []ShareInfo `json:"shares"`
	Consistency string      `json:"consistency"`
}
