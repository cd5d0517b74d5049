package node

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/route"
)

// The budget holder's errors reach clients with route's messages: a
// spent budget 402, escrow not gathered in time the mesh's own slowness,
// 503 admission_timeout and never 429 (node/ledger's test of the same
// name checks the mapping's causes).
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
		{wait, http.StatusServiceUnavailable, "admission_timeout", "this node is giving its budget escrow back (retry after 1s)"},
	} {
		got := ledger.RouteError(tc.err)
		status, e := classify(got)
		if status != tc.status || e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("%v: got %d %s %q, want %d %s %q", tc.err, status, e.Code, e.Message, tc.status, tc.code, tc.msg)
		}
		if !errors.Is(got, tc.err) && !errors.As(got, new(*route.RetryAfterError)) {
			t.Errorf("%v: the mapped error %v lost its cause", tc.err, got)
		}
	}
}
