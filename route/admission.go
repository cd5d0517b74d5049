package route

import (
	"context"
	"fmt"
	"time"
)

// Stage names the admission check that refused an attempt.
type Stage string

const (
	StageGuard   Stage = "guard"   // the residency and reach invariant
	StageBudget  Stage = "budget"  // the tenant's budget could not be reserved
	StageHealth  Stage = "health"  // the provider is cooling down or ejected
	StageReplica Stage = "replica" // the target's replica is ejected or at its max_concurrent
	StageQuota   Stage = "quota"   // the provider's rate share is spent
)

// Refusal is why Admit refused an attempt. What the earlier stages took
// has been given back.
type Refusal struct {
	Stage Stage
	Err   error
	// Wait is, for StageQuota, how long until the share may allow it.
	Wait time.Duration
	// Lease is, for StageQuota, a share not granted yet rather than used.
	Lease bool
	// Waited is how long the budget stage waited for escrow first.
	Waited time.Duration
}

func (r *Refusal) Error() string { return string(r.Stage) + ": " + r.Err.Error() }

func (r *Refusal) Unwrap() error { return r.Err }

// Ticket is an admitted attempt: what admission took (a budget hold, the
// tracker's slots, a rate share, a place on the replica ring) until it is
// settled. Settle, or Report and then Spend, or Abandon ends it; each part
// settles once, whichever is called again.
type Ticket struct {
	e       *Executor
	t       *Target
	hold    BudgetHold // nil: no budget
	adm     Admission
	radm    Admission // the replica's; provider "" when not tracked apart
	tracked bool      // adm is held
	quota   bool      // t.Tokens were taken from the quota
	ring    *Ring     // the ring the replica's slot was taken on
	req     *Request  // the request the attempt is of, for its charge
	// Waited is how long the budget stage waited for escrow.
	Waited time.Duration

	reported, spent bool
}

// Report is how an attempt went, for its ticket to settle.
type Report struct {
	Outcome    Outcome
	RetryAfter time.Duration // a 429's cooldown
	// TTFT is a stream's time to its first event, Total the time to a
	// whole non-streamed answer: they feed the latency averages.
	TTFT, Total time.Duration
	// Answered means the provider accepted the request (200): it may bill
	// for it. Known means Usage is known, and Counted that the node
	// counted it itself (the provider reported none).
	Answered, Known, Counted bool
	Usage                    Usage
}

// Settled is what settling charged.
type Settled struct {
	Usage    Usage   // the usage charged, cleaned (Usage.Clean)
	Cost     float64 // USD
	Cooldown time.Duration
}

// Admit runs the admission of one attempt of t, in order: the guard (the
// invariant, re-checked right before every call: whatever made the plan,
// a target that breaks it is never tried), then — unless a via node
// calls the provider and admits it there — the tenant's budget, the
// provider's health, its replica's, its rate share, and a slot on its
// replica ring (within the replica's max_concurrent; the prompt's prefix
// is recorded in the provider's index as sent there). Budget comes first: a request waiting for escrow holds no
// provider's admission (a half-open probe's among them) while it waits.
// The error is a *Refusal; a nil error comes with a ticket to settle.
func (e *Executor) Admit(ctx context.Context, req *Request, t *Target) (*Ticket, error) {
	tk := new(Ticket)
	if rf := e.admit(ctx, req, t, tk); rf != nil {
		return nil, rf
	}
	return tk, nil
}

// admit fills tk, which Execute keeps in its attempt's state.
func (e *Executor) admit(ctx context.Context, req *Request, t *Target, tk *Ticket) *Refusal {
	*tk = Ticket{e: e, t: t, req: req}
	if err := e.guard.Check(req, t); err != nil {
		tk.reported, tk.spent = true, true
		return &Refusal{Stage: StageGuard, Err: err}
	}
	if t.Via != "" {
		tk.reported, tk.spent = true, true // nothing taken here
		return nil
	}
	now := e.now()
	refuse := func(s Stage, err error, wait time.Duration) *Refusal {
		tk.Abandon()
		return &Refusal{Stage: s, Err: err, Wait: wait, Waited: tk.Waited}
	}
	if e.budget != nil {
		h, err := reserve(ctx, e.budget, req, t.MaxCost, now)
		if waited := e.now().Sub(now); waited > 0 {
			tk.Waited = waited
			now = e.now()
		}
		if err != nil {
			return refuse(StageBudget, err, 0)
		}
		tk.hold = h
	}
	var ok bool
	if tk.adm, ok = e.tracker.Acquire(t.Provider(), now); !ok {
		return refuse(StageHealth, fmt.Errorf("%w: %s is cooling down or ejected since planning", ErrNoProvider, t.Provider()), 0)
	}
	tk.tracked = true
	ring := t.Offer.Provider.Ring
	if ring != nil && e.replicas != nil {
		if tk.radm, ok = e.replicas.Acquire(t.Offer.Provider.ReplicaKey(t.Replica), now); !ok {
			return refuse(StageReplica, fmt.Errorf("%w: %s's replica %d is ejected", ErrNoProvider, t.Provider(), t.Replica), 0)
		}
	}
	if e.quota != nil {
		take := e.quota.Take
		if st, ok := e.quota.(spillTaker); ok && req.Spilled && t.Provider() == req.Hint {
			take = st.TakeSpilled
		}
		if ok, wait := take(t.Provider(), t.Tokens, now); !ok {
			rf := refuse(StageQuota, fmt.Errorf("%w: %s's rate share is spent", ErrRateLimited, t.Provider()), wait)
			rf.Lease = pendingShare(e.quota, t.Provider(), t.Tokens, now)
			return rf
		}
		tk.quota = true
	}
	if ring != nil {
		pv := t.Offer.Provider
		if !ring.TryAcquire(t.Replica, pv.Capacity(t.Replica)) {
			return refuse(StageReplica, fmt.Errorf("%w: %s's replica %s is at its max_concurrent (%d)", ErrNoProvider,
				t.Provider(), t.ReplicaName(), pv.Capacity(t.Replica)), 0)
		}
		tk.ring = ring
		// Recorded as it is sent, not answered: the next request with
		// this prefix follows it even while it is in flight.
		if x := pv.Prefix; x != nil {
			x.Record(req.Prefix(x.Seed()).Hashes, t.Replica, now)
		}
	}
	return nil
}

// spillTaker is a QuotaGate that can take for a request a peer spilled
// here without counting it as this node's demand.
type spillTaker interface {
	TakeSpilled(provider string, tokens int, now time.Time) (bool, time.Duration)
}

// Abandon gives back what the ticket took, for an attempt never made.
func (tk *Ticket) Abandon() {
	if !tk.reported {
		tk.Report(Report{Outcome: OutcomeCanceled})
	}
	tk.Spend(Report{})
}

// Settle reports the attempt to the tracker and spends what it used; see
// Report and Spend.
func (tk *Ticket) Settle(r Report) Settled {
	cooldown := tk.Report(r)
	s := tk.Spend(r)
	s.Cooldown = cooldown
	return s
}

// Report ends the tracker's admissions by the attempt's outcome and
// returns the cooldown a 429 imposed. A provider's own 429 shrinks the
// mesh-wide share handed out.
func (tk *Ticket) Report(r Report) time.Duration {
	if tk.reported {
		return 0
	}
	tk.reported = true
	e := tk.e
	now := e.now()
	report := func(tr *Tracker, ad Admission) time.Duration {
		switch r.Outcome {
		case OutcomeOK:
			tr.Success(ad, r.TTFT, r.Total)
		case OutcomeRateLimited:
			return tr.RateLimited(ad, r.RetryAfter, now)
		case OutcomeRefused, OutcomeTooLarge, OutcomeCanceled:
			tr.Release(ad)
		default:
			tr.Failure(ad, now)
		}
		return 0
	}
	if tk.tracked && r.Outcome == OutcomeOK && r.Known && !r.Counted && tk.t.Offer.Model.API != APIEmbeddings {
		// The provider's own word on its prompt cache; an embedding has
		// none, and a count of the node's own knows nothing of it.
		u := r.Usage.Clean()
		e.tracker.PromptCache(tk.t.Provider(), u.PromptTokens, u.CachedTokens)
	}
	if tk.quota && r.Outcome == OutcomeRateLimited {
		// The provider's own 429 (this node called it). A peer's
		// refusal of a forward is not one, and never gets here.
		if rl, ok := e.quota.(interface{ RateLimited(provider string) }); ok {
			rl.RateLimited(tk.t.Provider())
		}
	}
	switch {
	case !tk.tracked:
		return 0
	case tk.radm.provider == "":
		return report(e.tracker, tk.adm)
	}
	// A replica's 429 cools that replica down, not its siblings; its
	// failures count against both (the provider's only when they run on,
	// which failing over to siblings interrupts).
	cooldown := report(e.replicas, tk.radm)
	if r.Outcome == OutcomeRateLimited {
		e.tracker.Release(tk.adm)
	} else {
		report(e.tracker, tk.adm)
	}
	return cooldown
}

// Spend gives back the rate share the attempt did not use, settles the
// budget hold at its cost and frees the ring's slot. An answer the
// provider accepted but whose usage is unknown is charged at the
// attempt's upper bound: the provider may bill for it, and a budget must
// never be overspent.
func (tk *Ticket) Spend(r Report) Settled {
	if tk.spent {
		return Settled{}
	}
	tk.spent = true
	t := tk.t
	u := r.Usage.Clean()
	cost, used := settledCost(t, r)
	if tk.quota && used != t.Tokens {
		tk.e.quota.Return(t.Provider(), t.Tokens-used, tk.e.now())
	}
	if tk.hold != nil {
		tk.hold.Settle(cost)
	}
	if c := tk.e.charges; c != nil && r.Answered && tk.req != nil {
		c.Charged(Charge{Tenant: tk.req.Tenant, Key: tk.req.Key, Model: t.Offer.Model.Name, Provider: t.Provider(), Tags: tk.req.Tags, USD: cost})
	}
	if tk.ring != nil {
		tk.ring.Release(t.Replica)
	}
	return Settled{Usage: u, Cost: cost}
}

// settledCost is what an attempt that went as r costs, and the tokens it
// used of its rate share: its usage at the model's prices; its upper
// bound when the provider accepted it but its usage cannot be known (the
// provider may bill for it, and a budget must never be overspent);
// nothing when it was not accepted. Spend settles it, and the answer
// tells the client the same figure (X-LLMesh-Cost).
func settledCost(t *Target, r Report) (cost float64, used int) {
	switch {
	case !r.Answered:
		return 0, 0
	case !r.Known:
		return t.MaxCost, t.Tokens
	}
	u := r.Usage.Clean()
	return t.Offer.Model.Cost(u), u.PromptTokens + u.CompletionTokens
}

// Seat places session on the ticket's replica of the ring, for its next
// turn to find the replica's prompt cache warm.
func (tk *Ticket) Seat(session string) {
	if tk.ring != nil {
		tk.ring.Seat(session, tk.t.Replica, tk.e.now())
	}
}
