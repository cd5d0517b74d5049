package route

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
)

// fakeBudget records reservations and their settlements.
type fakeBudget struct {
	err      error
	reserved int
	settled  []float64
}

func (b *fakeBudget) Reserve(context.Context, string, float64, int, time.Time, time.Time) (BudgetHold, error) {
	b.reserved++
	if b.err != nil {
		return nil, b.err
	}
	return fakeHold{b}, nil
}

type fakeHold struct{ b *fakeBudget }

func (h fakeHold) Settle(usd float64) { h.b.settled = append(h.b.settled, usd) }

// fakeQuota refuses when wait is set, and records what it is given back.
type fakeQuota struct {
	wait     time.Duration
	taken    int
	returned []int
}

func (q *fakeQuota) Allow(string, int, time.Time) (bool, time.Duration) { return q.wait == 0, q.wait }

func (q *fakeQuota) Take(_ string, tokens int, _ time.Time) (bool, time.Duration) {
	if q.wait > 0 {
		return false, q.wait
	}
	q.taken += tokens
	return true, 0
}

func (q *fakeQuota) Return(_ string, tokens int, _ time.Time) {
	q.returned = append(q.returned, tokens)
}

type admitFixture struct {
	e      *Executor
	tr     *Tracker
	budget *fakeBudget
	quota  *fakeQuota
	target *Target
	now    time.Time
}

// newAdmitFixture is an executor of region r1 with a provider "p" of two
// replicas in the eu, and a target for it on replica 1.
func newAdmitFixture(t *testing.T) *admitFixture {
	p := offer("p", 1, 2, "eu")
	p.Replicas = []string{"http://p0.test", "http://p1.test"}
	cat := testCatalog(t, p)
	f := &admitFixture{tr: NewTracker(DefaultHealthConfig(), TrackerHooks{}), budget: &fakeBudget{}, quota: &fakeQuota{}, now: time.Unix(1e9, 0)}
	regions, err := region.NewMap([]region.Region{{Name: "r1", Jurisdiction: "eu"}})
	if err != nil {
		t.Fatal(err)
	}
	f.e = NewExecutor(DefaultExecutorConfig(), ExecutorDeps{Guard: Guard{Region: "r1", Regions: regions}, Tracker: f.tr,
		Budget: f.budget, Quota: f.quota, Tokenizer: &Tokenizer{}, Clock: func() time.Time { return f.now }})
	f.target = &Target{Offer: cat.Offers("m")[0], Replica: 1, MaxCost: 0.5, Tokens: 100}
	return f
}

func (f *admitFixture) ring() *Ring { return f.target.Offer.Provider.Ring }

func stageOf(t *testing.T, err error) Stage {
	t.Helper()
	var rf *Refusal
	if !errors.As(err, &rf) {
		t.Fatalf("admission error %v is not a *Refusal", err)
	}
	return rf.Stage
}

// Each stage refuses in turn, and what the stages before it took is given
// back: the guard before the budget, the budget before the tracker, the
// tracker before the quota.
func TestAdmitRefusesStageByStage(t *testing.T) {
	t.Run("guard", func(t *testing.T) {
		f := newAdmitFixture(t)
		req := &Request{Residency: region.Residency{Jurisdiction: "us"}}
		_, err := f.e.Admit(context.Background(), req, f.target)
		if stageOf(t, err) != StageGuard || !errors.Is(err, ErrNoCompliantProvider) || f.budget.reserved != 0 {
			t.Fatalf("got %v after %d reservations, want the guard's refusal before any", err, f.budget.reserved)
		}
	})
	t.Run("budget", func(t *testing.T) {
		f := newAdmitFixture(t)
		f.budget.err = ErrBudgetExceeded
		_, err := f.e.Admit(context.Background(), &Request{}, f.target)
		if stageOf(t, err) != StageBudget || !errors.Is(err, ErrBudgetExceeded) || f.quota.taken != 0 {
			t.Fatalf("got %v, %d tokens taken", err, f.quota.taken)
		}
	})
	t.Run("health", func(t *testing.T) {
		f := newAdmitFixture(t)
		f.tr.CoolDown("p", f.now.Add(time.Minute))
		_, err := f.e.Admit(context.Background(), &Request{}, f.target)
		if stageOf(t, err) != StageHealth || len(f.budget.settled) != 1 || f.budget.settled[0] != 0 || f.quota.taken != 0 {
			t.Fatalf("got %v, holds settled %v, %d tokens taken", err, f.budget.settled, f.quota.taken)
		}
	})
	t.Run("quota", func(t *testing.T) {
		f := newAdmitFixture(t)
		f.quota.wait = 3 * time.Second
		// Eject the provider so that the attempt's admission is the probe:
		// refused later, it must give the probe's slot back.
		for range DefaultHealthConfig().EjectAfter {
			a, _ := f.tr.Acquire("p", f.now)
			f.tr.Failure(a, f.now)
		}
		f.now = f.now.Add(time.Hour)
		_, err := f.e.Admit(context.Background(), &Request{}, f.target)
		var rf *Refusal
		if !errors.As(err, &rf) || rf.Stage != StageQuota || rf.Wait != 3*time.Second || len(f.budget.settled) != 1 {
			t.Fatalf("got %v, holds settled %v", err, f.budget.settled)
		}
		if _, ok := f.tr.Acquire("p", f.now); !ok {
			t.Fatal("the refused attempt kept the probe's slot")
		}
		if f.ring().InFlight(1) != 0 {
			t.Fatal("a refused attempt holds a slot on the ring")
		}
	})
}

// A ticket settles once: the hold at the answer's cost, the unused rate
// share back, the ring's slot freed; settling or abandoning it again
// changes nothing.
func TestTicketSettlesOnce(t *testing.T) {
	f := newAdmitFixture(t)
	tk, err := f.e.Admit(context.Background(), &Request{}, f.target)
	if err != nil {
		t.Fatal(err)
	}
	if f.ring().InFlight(1) != 1 || f.quota.taken != 100 || f.budget.reserved != 1 {
		t.Fatalf("admitted: ring %d in flight, %d tokens taken, %d reserved", f.ring().InFlight(1), f.quota.taken, f.budget.reserved)
	}
	r := Report{Outcome: OutcomeOK, Answered: true, Known: true, Usage: Usage{PromptTokens: 30, CompletionTokens: 20}}
	s := tk.Settle(r)
	want := f.target.Offer.Model.Cost(Usage{PromptTokens: 30, CompletionTokens: 20})
	if s.Cost != want || s.Usage != r.Usage {
		t.Fatalf("settled %+v, want cost %g", s, want)
	}
	tk.Settle(r)
	tk.Abandon()
	if len(f.budget.settled) != 1 || f.budget.settled[0] != want || len(f.quota.returned) != 1 || f.quota.returned[0] != 50 || f.ring().InFlight(1) != 0 {
		t.Fatalf("holds %v, returned %v, ring %d in flight", f.budget.settled, f.quota.returned, f.ring().InFlight(1))
	}
}

// An answer accepted whose usage is unknown is charged at the attempt's
// upper bound; an abandoned ticket gives everything back.
func TestTicketChargesUnknownUsageAndAbandons(t *testing.T) {
	f := newAdmitFixture(t)
	tk, err := f.e.Admit(context.Background(), &Request{}, f.target)
	if err != nil {
		t.Fatal(err)
	}
	if s := tk.Settle(Report{Outcome: OutcomeBroken, Answered: true}); s.Cost != f.target.MaxCost {
		t.Fatalf("charged %g, want the upper bound %g", s.Cost, f.target.MaxCost)
	}
	tk, err = f.e.Admit(context.Background(), &Request{}, f.target)
	if err != nil {
		t.Fatal(err)
	}
	tk.Abandon()
	tk.Abandon()
	if n := len(f.budget.settled); n != 2 || f.budget.settled[1] != 0 || f.quota.returned[len(f.quota.returned)-1] != 100 || f.ring().InFlight(1) != 0 {
		t.Fatalf("holds %v, returned %v, ring %d in flight", f.budget.settled, f.quota.returned, f.ring().InFlight(1))
	}
}
