package consensus

import (
	"errors"
	"fmt"
	"time"
)

// Errors of the consensus layer, defined once. node/ maps the budget
// holder's to route/'s (its gates adapter) and so to HTTP statuses.
var (
	ErrNotLeader = errors.New("not the Raft leader")
	ErrNoLeader  = errors.New("no Raft leader is known")
	ErrStopped   = errors.New("the ledger is shutting down")

	// Errors a command can fail with.
	ErrUnknownCommand = errors.New("unknown command type")
	ErrNoTenant       = errors.New("no such tenant")
	ErrInvalid        = errors.New("invalid command")
	// ErrLedgerVersion: a command needs a ledger version above the one
	// the voters agreed on; it is refused, not applied, until every
	// voter is upgraded.
	ErrLedgerVersion = errors.New("ledger upgrade required")

	// ErrBudgetExceeded: what a tenant could still spend cannot cover a
	// reservation. It does not lapse by waiting.
	ErrBudgetExceeded = errors.New("budget exceeded")
)

// RetryAfterError is a reservation the budget holder could not make yet:
// the escrow it needs is being gathered, or the node is giving its escrow
// back. A retry after After may succeed.
type RetryAfterError struct {
	After time.Duration
	Msg   string
	// Transient means the refusal lapses by itself, within After, so a
	// request may wait for it instead of being refused.
	Transient bool
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%s (retry after %s)", e.Msg, e.After.Round(time.Millisecond))
}
