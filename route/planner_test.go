package route

import (
	"errors"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
)

func testCatalog(t testing.TB, ps ...Provider) *Catalog {
	t.Helper()
	c, err := NewCatalog(ps)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func offer(name string, in, out float64, js ...region.Jurisdiction) Provider {
	return Provider{
		Name: name, Kind: KindOpenAI, Region: "r1", Reach: ReachGlobal, BaseURL: "http://" + name + ".test",
		Jurisdictions: region.NewSet(js...),
		Models:        []Model{{Name: "m", InputUSDPerMTok: in, OutputUSDPerMTok: out}},
	}
}

func chatReq(t testing.TB, body string) *Request {
	t.Helper()
	c, err := ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return &Request{Chat: c}
}

func order(p *Plan) []string {
	var out []string
	for _, t := range p.Targets {
		out = append(out, t.Provider())
	}
	return out
}

func TestPlannerOrdersByCostThenLatencyThenPriority(t *testing.T) {
	now := time.Unix(0, 0)
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	pricey := offer("pricey", 5, 15, "us")
	fast := offer("fast", 1, 2, "us")
	slow := offer("slow", 1, 2, "us")
	tie := offer("tie", 1, 2, "us")
	tie.Priority = -1
	cat := testCatalog(t, pricey, slow, fast, tie)
	pl := &Planner{Region: "r1", Catalog: cat, Health: tr}
	tr.Success(Admission{provider: "fast"}, 100*time.Millisecond, time.Second)
	tr.Success(Admission{provider: "slow"}, 400*time.Millisecond, 3*time.Second)
	tr.Success(Admission{provider: "tie"}, 100*time.Millisecond, time.Second)

	plan, err := pl.Plan(chatReq(t, `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hello there"}]}`), now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tie", "fast", "slow", "pricey"}
	if got := order(plan); !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if c := plan.Targets[0]; c.Cost <= 0 || c.MaxCost < c.Cost || c.Tokens < 100 {
		t.Fatalf("cost figures: %+v", c)
	}
	if e := plan.Explain(0, nil); e == "" {
		t.Fatal("no explanation")
	}
}

func TestPlannerHardFilters(t *testing.T) {
	now := time.Unix(0, 0)
	cfg := DefaultHealthConfig()
	cfg.EjectAfter = 1
	tr := NewTracker(cfg, TrackerHooks{})
	local := offer("local-gpu", 0.1, 0.1, "eu")
	local.Reach, local.Region = ReachRegion, "r2"
	cat := testCatalog(t, offer("a", 1, 1, "us"), offer("b", 2, 2, "us"), offer("c", 3, 3, "eu"), local)
	lim := NewLimiter([]*Provider{{Name: "c", RPM: 1}})
	pl := &Planner{Region: "r1", Catalog: cat, Health: tr, Quota: lim}
	req := chatReq(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)

	tr.Failure(Admission{provider: "a"}, now) // ejected
	tr.RateLimited(Admission{provider: "b"}, 2*time.Second, now)
	plan, err := pl.Plan(req, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := order(plan); !equal(got, []string{"c"}) {
		t.Fatalf("targets %v, want [c]; skipped %+v", got, plan.Skipped)
	}
	if len(plan.Skipped) != 3 {
		t.Fatalf("skipped %+v", plan.Skipped)
	}

	// Residency: an EU request never plans a US provider.
	req.Residency = region.Residency{Jurisdiction: "eu"}
	plan, _ = pl.Plan(req, now)
	for _, tg := range plan.Targets {
		if !tg.Offer.Provider.Jurisdictions.Contains("eu") {
			t.Fatalf("non-compliant target %s", tg.Provider())
		}
	}
	req.Residency = region.Residency{Jurisdiction: "jp"}
	if _, err := pl.Plan(req, now); !errors.Is(err, ErrNoCompliantProvider) {
		t.Fatalf("got %v, want ErrNoCompliantProvider", err)
	}
	req.Residency = region.Residency{}

	// With c's one request taken, nothing is left: a is ejected, so the
	// node has no provider (503).
	lim.Take("c", 1, now)
	if _, err = pl.Plan(req, now); !errors.Is(err, ErrNoProvider) {
		t.Fatalf("got %v, want ErrNoProvider", err)
	}
	// When every target is only rate limited, the answer is a retry-after
	// that ends with the first of them (b's cooldown, 2s).
	pl.Catalog = testCatalog(t, offer("b", 2, 2, "us"), offer("c", 3, 3, "eu"))
	_, err = pl.Plan(req, now)
	var ra *RetryAfterError
	if !errors.As(err, &ra) || ra.After != 2*time.Second {
		t.Fatalf("got %v, want a retry-after of 2s", err)
	}

	// Unknown model.
	if _, err := pl.Plan(chatReq(t, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`), now); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("got %v, want ErrModelNotFound", err)
	}
}

func TestPlannerRegionReach(t *testing.T) {
	gpu := offer("gpu", 0.01, 0.01, "eu")
	gpu.Reach, gpu.Region = ReachRegion, "eu-west"
	cat := testCatalog(t, gpu, offer("api", 1, 1, "eu"))
	req := chatReq(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	in, _ := (&Planner{Region: "eu-west", Catalog: cat, Health: tr}).Plan(req, time.Unix(0, 0))
	out, _ := (&Planner{Region: "us-east", Catalog: cat, Health: tr}).Plan(req, time.Unix(0, 0))
	if !equal(order(in), []string{"gpu", "api"}) || !equal(order(out), []string{"api"}) {
		t.Fatalf("in region %v, outside %v", order(in), order(out))
	}
}

func TestPickReplicaIsStickyAndMovesLittle(t *testing.T) {
	eps := []string{"http://a", "http://b", "http://c", "http://d"}
	moved := 0
	for i := range 1000 {
		s := "session-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		r := pickReplica(eps, s)
		if pickReplica(eps, s) != r {
			t.Fatal("not deterministic")
		}
		// Removing replica d moves only d's sessions.
		r2 := pickReplica(eps[:3], s)
		if eps[r] != "http://d" && eps[r2] != eps[r] {
			moved++
		}
	}
	if moved != 0 {
		t.Fatalf("%d sessions moved off surviving replicas", moved)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func BenchmarkPlan(b *testing.B) {
	var ps []Provider
	for _, n := range []string{"openai", "azure", "gpu", "together", "fireworks", "groq"} {
		ps = append(ps, offer(n, 0.15, 0.6, "us", "eu"))
	}
	cat := testCatalog(b, ps...)
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	for i, p := range ps {
		tr.Success(Admission{provider: p.Name}, time.Duration(i+1)*50*time.Millisecond, time.Second)
	}
	pl := &Planner{Region: "r1", Catalog: cat, Health: tr, Quota: NewLimiter(cat.Providers())}
	req := chatReq(b, `{"model":"m","max_tokens":256,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Explain consistent hashing with bounded loads."}]}`)
	req.Residency = region.Residency{Jurisdiction: "eu"}
	now := time.Unix(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pl.Plan(req, now); err != nil {
			b.Fatal(err)
		}
	}
}
