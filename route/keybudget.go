package route

import (
	"context"
	"time"
)

// KeyBudgetGate is a BudgetGate that also holds API keys to budgets of
// their own. The executor reserves through ReserveKey a request that
// names its key: the key's budget (if it has one) and its tenant's both
// cover usd, or neither is held. Its errors are Reserve's.
type KeyBudgetGate interface {
	BudgetGate
	ReserveKey(ctx context.Context, tenant, key string, usd float64, prio int, until, now time.Time) (BudgetHold, error)
}

// reserve holds the attempt's upper bound usd of req's budgets: its
// key's and its tenant's where the gate keeps keys' budgets, else its
// tenant's.
func reserve(ctx context.Context, g BudgetGate, req *Request, usd float64, now time.Time) (BudgetHold, error) {
	if kg, ok := g.(KeyBudgetGate); ok && req.Key != "" {
		return kg.ReserveKey(ctx, req.Tenant, req.Key, usd, req.Priority, req.AdmitBy, now)
	}
	return g.Reserve(ctx, req.Tenant, usd, req.Priority, req.AdmitBy, now)
}
