package consensus

// A rate holder of keys' and tenants' mesh-wide limits: the same shares
// as providers' (KeyRate and TenantRate name them to the ledger), taken
// for a request once, at the node it entered, for every limit it is
// under at once or for none.

import (
	"math"
	"slices"
	"time"
)

// kickSpacing bounds how often Kick brings a renewal forward.
const kickSpacing = 250 * time.Millisecond

// Kick asks Run to renew the shares now rather than at the leader's
// refresh (a request is waiting for share, or a limit was set), at most
// every kickSpacing. It never blocks.
func (h *RateHolder) Kick() {
	h.mu.Lock()
	now := h.now()
	if now.Sub(h.kicked) < kickSpacing {
		h.mu.Unlock()
		return
	}
	h.kicked = now
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// TakeAll takes one request and tokens from the share of each of names
// (those without a limit take nothing), all of them or none. When one
// is spent it returns false, how long until that one could allow it, and
// its name. demand counts the request as this node's demand of each
// share (once per request: a request waiting for share asks again
// without it).
func (h *RateHolder) TakeAll(names []string, tokens int, now time.Time, demand bool) (bool, time.Duration, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range names {
		if ok, wait := h.checkLocked(name, tokens, now, false, false); !ok {
			if demand {
				for _, n := range names {
					h.wantLocked(n, now)
				}
			}
			return false, wait, name
		}
	}
	for _, name := range names {
		h.checkLocked(name, tokens, now, true, demand)
	}
	return true, 0, ""
}

// wantLocked counts one request as demand of name's share.
func (h *RateHolder) wantLocked(name string, now time.Time) {
	if s := h.shares[name]; s != nil && len(s.wanted) < maxWanted {
		s.wanted = append(s.wanted, now)
	}
}

// Capacity returns name's configured capacity: requests and tokens a
// minute, 0 for none.
func (h *RateHolder) Capacity(name string) (rpm, tpm int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.caps[name]
	return int64(c[0]), int64(c[1])
}

// Limited reports whether any share is limited.
func (h *RateHolder) Limited() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.caps) > 0
}

// ReportUsage makes each renewal say what the node sent in the window
// (Demand.Reports), and hold the share to that from the renewal's start
// until its grant arrives (after a failed renewal, until one succeeds).
// The ledger then counts only this node's last grant and what it sent
// against the others, rather than every grant of a lease and a window:
// share a node holds and does not use reaches the others at its next
// renewal. Call it before Run.
func (h *RateHolder) ReportUsage() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.report = true
}

// busyRefresh is how often a holder that reports what it sent renews
// while its shares are in demand: a share one node does not use reaches
// another within about this, well inside limits.admission_wait.
const busyRefresh = time.Second

// nextRenewal is when Run renews next, refresh (the leader's) after
// this one, or sooner for a reporting holder whose shares were asked for
// in the last recentDemand.
func (h *RateHolder) nextRenewal(refresh time.Duration) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.report {
		return refresh
	}
	since := h.now().Add(-recentDemand)
	for _, s := range h.shares {
		if n := len(s.wanted); n > 0 && s.wanted[n-1].After(since) {
			return min(refresh, busyRefresh)
		}
	}
	return refresh
}

// Untake gives back to the shares of names a request TakeAll took at at
// with tokens: one that reached no provider (refused for a budget, a
// provider's own limit, no compliant provider), so that it counts
// against no limit. It is gone already once the window has passed.
func (h *RateHolder) Untake(names []string, tokens int, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range names {
		s := h.shares[name]
		if s == nil {
			continue
		}
		for i := len(s.sent) - 1; i >= 0 && !s.sent[i].Before(at); i-- {
			if s.sent[i].Equal(at) {
				s.sent = slices.Delete(s.sent, i, i+1)
				break
			}
		}
		for i := len(s.tokens) - 1; i >= 0 && !s.tokens[i].at.Before(at); i-- {
			if r := s.tokens[i]; r.at.Equal(at) {
				// What is left of its count: another request's Return
				// may have taken from it as the newest, and that
				// give-back is lost (more counted, never less).
				d := math.Min(float64(tokens), r.n)
				s.tokens[i].n -= d
				s.tokenSum -= d
				break
			}
		}
	}
}

// slowRenewal is how long a renewal may take before a share held to what
// was sent meanwhile is the ledger's slowness rather than the share's use.
const slowRenewal = time.Second

// Pending reports whether an attempt costing tokens is refused now only
// for want of a lease, not for the share's use: no share is in force
// (none granted yet, or it lapsed while the leader could not be
// reached), or the share is held to what was sent while a renewal that
// reported it is under way. The request path answers such a refusal,
// once it has waited limits.admission_wait, as the mesh's slowness (503
// admission_timeout) rather than a limit reached (429).
func (h *RateHolder) Pending(name string, tokens int, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.shares[name]
	switch {
	case s == nil || s.unlimited:
		return false
	case !now.Before(s.expires):
		return !h.noVoters()
	}
	s.trim(now, h.window)
	if float64(len(s.sent)) >= s.rpm || s.tokenSum+float64(tokens) > s.tpm {
		return false // the share is used
	}
	// It would admit, but for the journal's next record, or for a
	// renewal under way longer than a renewal takes (the ledger slow or
	// unreachable: a renewal of a few milliseconds is the share's use
	// being counted, not the mesh's slowness).
	return s.frozen && now.Sub(s.frozenAt) >= slowRenewal || h.overCeilingLocked(name, s, tokens)
}
