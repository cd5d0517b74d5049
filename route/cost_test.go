package route

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func price(v float64) *float64 { return &v }

// Cached prompt tokens are charged at the cached input price, the rest
// of the prompt at the input price; a model without a cached price gives
// no discount, and one of 0 charges cached tokens nothing.
func TestCostPricesCachedTokens(t *testing.T) {
	m := Model{InputUSDPerMTok: 2, OutputUSDPerMTok: 8, CachedInputUSDPerMTok: price(0.5)}
	u := Usage{PromptTokens: 1000, CachedTokens: 600, CompletionTokens: 100}
	if got, want := m.Cost(u), (400*2+600*0.5+100*8)/1e6; got != want {
		t.Fatalf("cost %g, want %g", got, want)
	}
	if got, want := m.Cost(Usage{PromptTokens: 1000, CompletionTokens: 100}), (1000*2+100*8)/1e6; got != want {
		t.Fatalf("without cached tokens: %g, want %g", got, want)
	}
	plain := Model{InputUSDPerMTok: 2, OutputUSDPerMTok: 8}
	if got, want := plain.Cost(u), plain.Cost(Usage{PromptTokens: 1000, CompletionTokens: 100}); got != want {
		t.Fatalf("no cached price: %g, want the input price's %g", got, want)
	}
	free := Model{InputUSDPerMTok: 2, CachedInputUSDPerMTok: price(0)}
	if got, want := free.Cost(Usage{PromptTokens: 1000, CachedTokens: 1000}), 0.0; got != want {
		t.Fatalf("a free cache charged %g", got)
	}
	// A provider's nonsense never charges less than nothing nor prices
	// more tokens cached than the prompt had.
	if got, want := m.Cost(Usage{PromptTokens: 10, CachedTokens: 50}), 10*0.5/1e6; got != want {
		t.Fatalf("more cached than prompt: %g, want %g", got, want)
	}
	if got := m.Cost(Usage{PromptTokens: -5, CachedTokens: -3, CompletionTokens: -1}); got != 0 {
		t.Fatalf("negative usage charged %g", got)
	}
	// The expected cost at a hit of h is the cost of h of the prompt
	// cached; 0 is the uncached cost exactly.
	if got, want := m.ExpectedCost(1000, 0.6, 100), m.Cost(u); math.Abs(got-want) > 1e-15 {
		t.Fatalf("expected cost at 60%%: %g, want %g", got, want)
	}
	if got, want := m.ExpectedCost(1000, 0, 100), m.Cost(Usage{PromptTokens: 1000, CompletionTokens: 100}); got != want {
		t.Fatalf("expected cost without a hit: %g, want %g", got, want)
	}
	if got, want := m.ExpectedCost(1000, 7, 0), m.ExpectedCost(1000, 1, 0); got != want {
		t.Fatalf("a hit over 1: %g, want %g", got, want)
	}
}

// Cached tokens are read from chat's prompt_tokens_details, the
// Responses API's input_tokens_details, and a stream's usage chunk.
func TestUsageReadsCachedTokens(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      Usage
	}{
		{"chat", `{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0}}`,
			Usage{PromptTokens: 2006, CompletionTokens: 300, CachedTokens: 1920}},
		{"chat without details", `{"prompt_tokens":12,"completion_tokens":3}`, Usage{PromptTokens: 12, CompletionTokens: 3}},
		{"chat with null details", `{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":null}`, Usage{PromptTokens: 12, CompletionTokens: 3}},
		{"responses", `{"input_tokens":1500,"input_tokens_details":{"cached_tokens":1024},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1540}`,
			Usage{PromptTokens: 1500, CompletionTokens: 40, CachedTokens: 1024}},
	} {
		var u Usage
		if err := u.UnmarshalJSON([]byte(tc.doc)); err != nil || u != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, u, err, tc.want)
		}
	}
	chunk := `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":900,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":768}}}`
	if u, ok := chunkUsage([]byte(chunk)); !ok || u != (Usage{PromptTokens: 900, CompletionTokens: 5, CachedTokens: 768}) {
		t.Fatalf("stream's usage chunk: %+v %v", u, ok)
	}
}

// Settlement charges the cached tokens at their price, while the
// reservation before the call stayed the uncached upper bound; the
// provider's own usage feeds its hit ratio, and a count of the node's
// own does not.
func TestTicketSettlesCachedTokens(t *testing.T) {
	f := newAdmitFixture(t)
	m := f.target.Offer.Model
	m.CachedInputUSDPerMTok = price(0.25)
	tk, err := f.e.Admit(context.Background(), &Request{}, f.target)
	if err != nil {
		t.Fatal(err)
	}
	u := Usage{PromptTokens: 80, CachedTokens: 64, CompletionTokens: 20}
	s := tk.Settle(Report{Outcome: OutcomeOK, Answered: true, Known: true, Usage: u})
	want := (16*1 + 64*0.25 + 20*2) / 1e6
	if s.Cost != want || s.Usage != u || len(f.budget.settled) != 1 || f.budget.settled[0] != want {
		t.Fatalf("settled %+v, holds %v; want $%g", s, f.budget.settled, want)
	}
	if h := f.tr.Health("p", f.now).CacheHit; math.Abs(h-0.8) > 1e-12 {
		t.Fatalf("hit ratio %g after 64 of 80 prompt tokens cached, want 0.8", h)
	}
	tk, err = f.e.Admit(context.Background(), &Request{}, f.target)
	if err != nil {
		t.Fatal(err)
	}
	tk.Settle(Report{Outcome: OutcomeOK, Answered: true, Known: true, Counted: true, Usage: Usage{PromptTokens: 80, CompletionTokens: 20}})
	if h := f.tr.Health("p", f.now).CacheHit; math.Abs(h-0.8) > 1e-12 {
		t.Fatalf("hit ratio %g after a counted answer, want it unchanged", h)
	}
}

// The hit ratio is cached over prompt tokens, both decayed by Alpha per
// answer: deterministic, weighted by prompt size, recent answers first.
func TestTrackerHitRatio(t *testing.T) {
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	now := time.Unix(0, 0)
	if h := tr.Health("p", now).CacheHit; h != 0 {
		t.Fatalf("unobserved: %g", h)
	}
	tr.PromptCache("p", 1000, 800)
	tr.PromptCache("p", 1000, 0)
	tr.PromptCache("p", 0, 0) // no prompt: says nothing
	const a = 0.2
	want := (a * (1 - a) * 800) / (a*(1-a)*1000 + a*1000)
	if h := tr.Health("p", now).CacheHit; math.Abs(h-want) > 1e-12 {
		t.Fatalf("hit ratio %g, want %g", h, want)
	}
	tr.PromptCache("q", 10, 99)
	if h := tr.Health("q", now).CacheHit; h != 1 {
		t.Fatalf("more cached than prompt: %g, want 1", h)
	}
}

// Two providers at the same prices: the one whose cache this node saw
// serving most of its prompts ranks first, at a lower expected cost, and
// the reservation's upper bound of both is what it was before any hit.
func TestPlannerExpectsTheObservedCacheHit(t *testing.T) {
	now := time.Unix(0, 0)
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	cold, warm := offer("cold", 1, 2, "us"), offer("warm", 1, 2, "us")
	for _, p := range []*Provider{&cold, &warm} {
		p.Models[0].CachedInputUSDPerMTok = price(0.1)
	}
	pl := &Planner{Region: "r1", Catalog: testCatalog(t, cold, warm), Health: tr}
	req := chatReq(t, `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"`+strings.Repeat("a long shared system prompt ", 40)+`"}]}`)
	before, err := pl.Plan(req, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := order(before); !equal(got, []string{"cold", "warm"}) {
		t.Fatalf("with no hit observed: %v, want name order", got)
	}
	tr.PromptCache("warm", 1000, 900)
	plan, err := pl.Plan(req, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := order(plan); !equal(got, []string{"warm", "cold"}) {
		t.Fatalf("order %v, want the warm cache first", got)
	}
	w, c := plan.Targets[0], plan.Targets[1]
	m := w.Offer.Model
	if want := m.ExpectedCost(plan.PromptTokens, 0.9, 50); math.Abs(w.Cost-want) > 1e-15 || w.Cost >= c.Cost {
		t.Fatalf("warm's expected cost %g, want %g below cold's %g", w.Cost, want, c.Cost)
	}
	if w.MaxCost != before.Targets[1].MaxCost || c.MaxCost != before.Targets[0].MaxCost ||
		w.MaxCost != m.Cost(Usage{PromptTokens: plan.PromptUpper, CompletionTokens: 50}) {
		t.Fatalf("upper bounds %g and %g changed from %g and %g", w.MaxCost, c.MaxCost, before.Targets[1].MaxCost, before.Targets[0].MaxCost)
	}
	if why := strings.Join(plan.Why(0), "; "); !strings.Contains(why, "90% of the prompt expected from the provider's cache") {
		t.Fatalf("why: %s", why)
	}
}
