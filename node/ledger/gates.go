package ledger

// Adapters from consensus's holders to the gates route's executor and
// planner declare: consensus returns its own errors and takes plain
// capacities, and route knows nothing of consensus.

import (
	"context"
	"errors"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/route"
)

// The rate holder's methods are route's quota gate as they are (and its
// TakeSpilled and RateLimited the executor's optional ones), so it plugs
// in unwrapped.
var _ route.QuotaGate = (*consensus.RateHolder)(nil)

// budgetGate is a node's budget escrow as route's budget gate: tenants'
// and keys' (see ReserveKey).
type budgetGate struct {
	h *consensus.BudgetHolder
	l *Ledger
}

var _ route.BudgetGate = budgetGate{}

// Reserve implements route.BudgetGate; its errors are route's.
func (g budgetGate) Reserve(ctx context.Context, tenant string, usd float64, prio int, until, now time.Time) (route.BudgetHold, error) {
	hold, err := g.h.Reserve(ctx, tenant, usd, prio, until, now)
	if err != nil {
		return nil, RouteError(err)
	}
	return hold, nil
}

// Charges is the node's spend tally as route's charge recorder: every
// charge this node settles is reported to the ledger with its syncs.
func (l *Ledger) Charges() route.ChargeRecorder { return chargeRecorder{l.spend} }

type chargeRecorder struct{ t *consensus.SpendTally }

// Charged implements route.ChargeRecorder.
func (c chargeRecorder) Charged(ch route.Charge) {
	c.t.Charge(ch.Tenant, ch.Key, ch.Tags, ch.Model, ch.Provider, ch.USD)
}

// RouteError maps the budget holder's errors to route's, keeping their
// messages: a *consensus.RetryAfterError becomes a *route.RetryAfterError
// with Lease set (escrow not gathered in time is the mesh's own
// slowness: it matches route.ErrAdmissionTimeout), and an error matching
// consensus.ErrBudgetExceeded matches route.ErrBudgetExceeded as well.
// Anything else passes unchanged.
func RouteError(err error) error {
	var ra *consensus.RetryAfterError
	switch {
	case errors.As(err, &ra):
		return &route.RetryAfterError{After: ra.After, Msg: ra.Msg, Transient: ra.Transient, Lease: true}
	case errors.Is(err, consensus.ErrBudgetExceeded):
		return budgetExceeded{err}
	}
	return err
}

// budgetExceeded is a consensus.ErrBudgetExceeded that matches
// route.ErrBudgetExceeded too, with the holder's message.
type budgetExceeded struct{ err error }

func (e budgetExceeded) Error() string        { return e.err.Error() }
func (e budgetExceeded) Unwrap() error        { return e.err }
func (e budgetExceeded) Is(target error) bool { return target == route.ErrBudgetExceeded }

// RateCapacities are the providers' configured limits, as the rate
// holder takes them.
func RateCapacities(providers []*route.Provider) []consensus.RateCapacity {
	caps := make([]consensus.RateCapacity, 0, len(providers))
	for _, p := range providers {
		caps = append(caps, consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
	}
	return caps
}
