package consensus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The budget holder refuses with its own errors: a *RetryAfterError while
// the escrow a reservation needs is not here yet, and a hold that settles
// nothing for a tenant without a budget.
func TestBudgetHolderReturnsItsOwnErrors(t *testing.T) {
	apply := func(context.Context, Command) (Result, error) { return Result{}, errors.New("no leader in this test") }
	h := NewBudgetHolder("n1", apply, func() map[string]bool { return map[string]bool{"acme": true} })
	_, err := h.TryReserve("acme", 0.01, time.Now())
	var ra *RetryAfterError
	if !errors.As(err, &ra) || ra.After != time.Second || errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("a reservation before any escrow: %v, want a *RetryAfterError of 1s", err)
	}
	if want := "this node is renewing its budget escrow for the tenant (retry after 1s)"; err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
	hold, err := h.TryReserve("free", 0.01, time.Now())
	if err != nil || hold == nil {
		t.Fatalf("a tenant without a budget: %v, %v", hold, err)
	}
	hold.Settle(0.02) // settles nothing, and must not panic
	if leases, free, inflight := h.Escrow(); leases != 0 || free != 0 || inflight != 0 {
		t.Errorf("an unbudgeted hold touched the escrow: %d leases, %v free, %v in flight", leases, free, inflight)
	}
}
