package consensus

// Writes and linearizable reads through Raft, on the leader.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Apply stamps cmd with this leader's clock and applies it through Raft,
// waiting for it to commit. It fails with ErrNotLeader on a follower, and
// with ErrLedgerVersion, applying nothing, when cmd needs a ledger
// version above the one the voters agreed on (see admit).
func (s *Server) Apply(ctx context.Context, cmd Command) (Result, error) {
	if !s.IsLeader() {
		return Result{}, ErrNotLeader
	}
	if err := s.admit(ctx, cmd); err != nil {
		return Result{}, err
	}
	cmd.Time = s.now().UnixNano()
	b, err := json.Marshal(cmd)
	if err != nil {
		return Result{}, err
	}
	timeout := s.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout <= 0 {
		return Result{}, context.DeadlineExceeded
	}
	start := time.Now()
	f := s.raft.Apply(b, timeout)
	// raft's timeout bounds only the enqueue; the wait for the commit is
	// bounded here. (The future resolves later, when Raft applies it or
	// loses leadership. One whose batch is queued for the FSM when Raft
	// shuts down never resolves, and its waiter stays: see wait.NoLeaks.)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-time.After(timeout):
		return Result{}, fmt.Errorf("consensus: apply: %w after %v", context.DeadlineExceeded, timeout)
	}
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return Result{}, ErrNotLeader
		}
		return Result{}, fmt.Errorf("consensus: apply: %w", err)
	}
	if s.applyObserver != nil {
		s.applyObserver(time.Since(start))
	}
	r, _ := f.Response().(Result)
	return r, nil
}

// ReadLinearizable runs fn on a state that reflects every write committed
// before the call: the leader confirms its leadership and applies what it
// has committed first (a Raft barrier).
func (s *Server) ReadLinearizable(fn func(*Ledger)) error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("consensus: barrier: %w", err)
	}
	s.fsm.Read(fn)
	return nil
}

// applyRates applies one node's renewal of its rate shares (boot: its
// process, 0 if unknown) and returns the grants, their lease and when to
// renew. It fails with ErrNotLeader on a follower.
func (s *Server) applyRates(ctx context.Context, node string, boot int64, demands []Demand) ([]Grant, time.Duration, time.Duration, error) {
	c, err := ratesCommand(node, boot, demands, s.rateLease, s.rateWindow+RateSlack)
	if err != nil {
		return nil, 0, 0, err
	}
	r, err := s.Apply(ctx, c)
	switch {
	case err != nil:
		return nil, 0, 0, err
	case r.Err != "":
		return nil, 0, 0, fmt.Errorf("ledger: %s", r.Err)
	case r.Rates == nil && len(demands) > 0:
		return nil, 0, 0, errNoRates
	}
	out := make([]Grant, len(r.Rates))
	for i, g := range r.Rates {
		out[i] = g.Grant()
	}
	return out, s.rateLease, rateRefresh(s.rateLease), nil
}
