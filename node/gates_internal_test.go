package node

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/route"
)

// The budget holder's errors reach clients as route's did before
// consensus had its own: the same status, code and message.
func TestBudgetGateErrorsMapToRoute(t *testing.T) {
	exceeded := fmt.Errorf("%w: tenant acme has $0.01 left of its budget for 2026-12, and the request may cost up to $0.02", consensus.ErrBudgetExceeded)
	wait := &consensus.RetryAfterError{After: time.Second, Msg: "this node is giving its budget escrow back"}
	for _, tc := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{exceeded, http.StatusPaymentRequired, "budget_exceeded", exceeded.Error()},
		{wait, http.StatusTooManyRequests, "rate_limited", "this node is giving its budget escrow back (retry after 1s)"},
	} {
		got := routeError(tc.err)
		status, e := classify(got)
		if status != tc.status || e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("%v: got %d %s %q, want %d %s %q", tc.err, status, e.Code, e.Message, tc.status, tc.code, tc.msg)
		}
		if !errors.Is(got, tc.err) && !errors.As(got, new(*route.RetryAfterError)) {
			t.Errorf("%v: the mapped error %v lost its cause", tc.err, got)
		}
	}
	if got := routeError(exceeded); !errors.Is(got, route.ErrBudgetExceeded) || !errors.Is(got, consensus.ErrBudgetExceeded) {
		t.Errorf("%v matches route.ErrBudgetExceeded %v, consensus.ErrBudgetExceeded %v", got,
			errors.Is(got, route.ErrBudgetExceeded), errors.Is(got, consensus.ErrBudgetExceeded))
	}
	var ra *route.RetryAfterError
	if got := routeError(wait); !errors.As(got, &ra) || ra.After != time.Second || !errors.Is(got, route.ErrRateLimited) {
		t.Errorf("%v is not a route.RetryAfterError of 1s", got)
	}
	other := errors.New("ledger unreachable")
	if got := routeError(other); got != other {
		t.Errorf("an error the holder does not classify changed: %v", got)
	}
}
