package ledger

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/route"
)

// The budget holder's errors become route's, keeping their messages and
// causes; escrow not gathered in time is the mesh's slowness, never a
// rate limit (node's TestBudgetGateErrorsMapToRoute checks the status
// and code).
func TestBudgetGateErrorsMapToRoute(t *testing.T) {
	exceeded := fmt.Errorf("%w: tenant acme has $0.01 left of its budget for 2026-12, and the request may cost up to $0.02", consensus.ErrBudgetExceeded)
	wait := &consensus.RetryAfterError{After: time.Second, Msg: "this node is giving its budget escrow back"}
	for _, tc := range []struct {
		err error
		msg string
	}{
		{exceeded, exceeded.Error()},
		{wait, "this node is giving its budget escrow back (retry after 1s)"},
	} {
		got := RouteError(tc.err)
		if got.Error() != tc.msg {
			t.Errorf("%v: got %q, want %q", tc.err, got.Error(), tc.msg)
		}
		if !errors.Is(got, tc.err) && !errors.As(got, new(*route.RetryAfterError)) {
			t.Errorf("%v: the mapped error %v lost its cause", tc.err, got)
		}
	}
	if got := RouteError(exceeded); !errors.Is(got, route.ErrBudgetExceeded) || !errors.Is(got, consensus.ErrBudgetExceeded) {
		t.Errorf("%v matches route.ErrBudgetExceeded %v, consensus.ErrBudgetExceeded %v", got,
			errors.Is(got, route.ErrBudgetExceeded), errors.Is(got, consensus.ErrBudgetExceeded))
	}
	var ra *route.RetryAfterError
	if got := RouteError(wait); !errors.As(got, &ra) || ra.After != time.Second || !ra.Lease ||
		!errors.Is(got, route.ErrAdmissionTimeout) || errors.Is(got, route.ErrRateLimited) {
		t.Errorf("%v is not a route.RetryAfterError of 1s for want of a lease (admission timed out, not rate limited)", got)
	}
	other := errors.New("ledger unreachable")
	if got := RouteError(other); got != other {
		t.Errorf("an error the holder does not classify changed: %v", got)
	}
}
