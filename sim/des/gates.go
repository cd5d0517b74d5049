package des

// Adapters from the simulated nodes' consensus holders to the gates the
// route executor's admission step takes, in virtual time.

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/route"
)

// rateCapacities are the limits of providers, as consensus's rate holder
// takes them.
func rateCapacities(providers []*route.Provider) []consensus.RateCapacity {
	caps := make([]consensus.RateCapacity, 0, len(providers))
	for _, p := range providers {
		caps = append(caps, consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
	}
	return caps
}

// budgetGate is a node's budget holder as the executor's budget gate. It
// never waits: where the holder would queue a request for a top-up, it
// syncs with the ledger at once (the holder kicks its sync loop, which
// asks the leader: a Raft round trip, here immediate) and tries once
// more. Its errors are consensus's, for serve to count.
type budgetGate struct {
	w *world
	n *simNode
}

func (g budgetGate) Reserve(_ context.Context, tenant string, usd float64, _ int, _, now time.Time) (route.BudgetHold, error) {
	if t := g.w.tenants[tenant]; t == nil || t.BudgetUSD <= 0 {
		return unbudgeted{}, nil
	}
	n := g.n
	n.touched = true
	h, err := n.budget.TryReserve(tenant, usd, now)
	var retry *consensus.RetryAfterError
	if errors.As(err, &retry) {
		_ = n.budget.Sync(context.Background(), false)
		h, err = n.budget.TryReserve(tenant, usd, now)
	}
	if err != nil {
		return nil, err
	}
	return touchingHold{h: h, n: n}, nil
}

// touchingHold marks its holder as having something to sync when it is
// settled.
type touchingHold struct {
	h *consensus.Hold
	n *simNode
}

func (t touchingHold) Settle(usd float64) {
	t.h.Settle(usd)
	t.n.touched = true
}

// unbudgeted is the hold of a tenant without a budget: nothing to settle.
type unbudgeted struct{}

func (unbudgeted) Settle(float64) {}

// noCalls is the executors' transport: the simulator models provider
// calls, and the executor admits attempts only.
type noCalls struct{}

func (noCalls) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("des: provider calls are modelled, not made")
}
