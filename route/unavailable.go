package route

// Why a plan has nothing left: residency, a configured limit, or the
// mesh's own lease mechanics.

import (
	"fmt"
	"strings"
	"time"
)

// leaseAware is a QuotaGate that can tell a rate share not granted (not
// yet, or not renewed in time, or held while a renewal is under way)
// from one used up: the first is the mesh's own slowness, which a
// client is answered 503 admission_timeout for once it has waited
// limits.admission_wait; the second a configured limit, 429.
type leaseAware interface {
	// Pending reports whether an attempt costing tokens is refused now
	// only for want of a lease, not for the share's use.
	Pending(provider string, tokens int, now time.Time) bool
}

// pendingShare reports whether q refuses provider now for want of a
// lease.
func pendingShare(q QuotaGate, provider string, tokens int, now time.Time) bool {
	la, ok := q.(leaseAware)
	return ok && la.Pending(provider, tokens, now)
}

// renewer is a QuotaGate that can be asked to renew its shares now: a
// request finds one spent, and the division should follow demand sooner
// than the next renewal.
type renewer interface{ Kick() }

// skipQuota leaves out a provider the node's rate share does not admit,
// saying whether the share is used or not granted yet, and asks for a
// renewal: the request waits for it (limits.admission_wait), and a share
// too small for what arrives here is the mesh's to fix, not the
// client's.
func (plan *Plan) skipQuota(q QuotaGate, provider string, tokens int, wait time.Duration, now time.Time) {
	if r, ok := q.(renewer); ok {
		r.Kick()
	}
	if pendingShare(q, provider, tokens, now) {
		plan.Skipped = append(plan.Skipped, Skip{Provider: provider, Reason: "no rate share granted to this node yet", RetryIn: wait, Lease: true})
		return
	}
	plan.skip(provider, "over this node's rate share", false, wait)
}

func (plan *Plan) residencySkips() int {
	n := 0
	for _, s := range plan.Skipped {
		if s.Residency {
			n++
		}
	}
	return n
}

// unavailable explains why no target is left: a retry-after error when
// every skip lapses by itself (with Lease when one of them is a share
// not granted yet); no_compliant_provider when providers were left out
// for residency (the request is not sent to them even though they might
// answer); ErrNoProvider otherwise.
func (plan *Plan) unavailable(req *Request) error {
	var wait time.Duration
	var reasons []string
	lease := false
	for _, s := range plan.Skipped {
		reasons = append(reasons, s.Provider+": "+s.Reason)
		if s.Residency {
			continue
		}
		lease = lease || s.Lease
		if s.RetryIn <= 0 {
			wait = -1
		} else if wait >= 0 && (wait == 0 || s.RetryIn < wait) {
			wait = s.RetryIn
		}
	}
	if wait > 0 {
		msg := "every provider of the model is rate limited ("
		if lease {
			msg = "the mesh has not granted this node a rate share of the model's providers in time ("
		}
		return &RetryAfterError{After: wait, Msg: msg + strings.Join(reasons, "; ") + ")", Transient: true, Lease: lease}
	}
	if plan.residencySkips() > 0 {
		return fmt.Errorf("%w: no provider allowed for residency %s is available (%s)", ErrNoCompliantProvider, req.Residency, strings.Join(reasons, "; "))
	}
	return fmt.Errorf("%w: %s", ErrNoProvider, strings.Join(reasons, "; "))
}
