package route

import (
	"errors"
	"fmt"
	"strings"
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
	// The guard on the hot path: planning allocates the plan and little
	// else (7 allocations when this was written).
	if a := testing.AllocsPerRun(100, func() { _, _ = pl.Plan(req, now) }); a > maxPlanAllocs {
		b.Fatalf("Plan makes %.0f allocations, more than %d", a, maxPlanAllocs)
	}
}

// maxPlanAllocs bounds the allocations of one Plan of six providers.
const maxPlanAllocs = 8

// BenchmarkPlanReplicas plans an 8K-token prompt for a provider of four
// replicas under the prefix policy, three of them holding some of its
// prefix: hashed is a request whose prefix was hashed already (a
// replan), new one hashed afresh.
func BenchmarkPlanReplicas(b *testing.B) {
	f := newReplicaFixture(b, ReplicaPrefix)
	req := chatBody(b, "", text("doc", 32*1024), "q")
	req.Session = "conv-1"
	hashes := req.Prefix(f.gpu.Prefix.Seed()).Hashes
	for r := range 3 {
		f.gpu.Prefix.Record(hashes[:len(hashes)/(r+1)], r, f.now)
		f.gpu.Ring.Acquire(r)
	}
	b.Run("hashed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.pl.Plan(req, f.now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req.prefix = PromptPrefix{}
			if _, err := f.pl.Plan(req, f.now); err != nil {
				b.Fatal(err)
			}
		}
	})
	if a := testing.AllocsPerRun(100, func() { _, _ = f.pl.Plan(req, f.now) }); a > maxPlanAllocs {
		b.Fatalf("Plan makes %.0f allocations, more than %d", a, maxPlanAllocs)
	}
}

// fakeMesh is a MeshView of fixed via nodes by region.
type fakeMesh map[string]string

func (m fakeMesh) Via(r string, _ API) (string, time.Duration, bool) {
	n, ok := m[r]
	return n, 20 * time.Millisecond, ok
}

func TestPlannerViaAndStrictTransit(t *testing.T) {
	gpu := offer("gpu-eu", 0.01, 0.01, "eu")
	gpu.Reach, gpu.Region = ReachRegion, "eu-west"
	api := offer("api-us", 1, 1, "us", "eu") // a global API processing in both
	api.Region = "us-east"
	cat := testCatalog(t, gpu, api)
	regions, _ := region.NewMap([]region.Region{{Name: "eu-west", Jurisdiction: "eu"}, {Name: "us-east", Jurisdiction: "us"}})
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	now := time.Unix(0, 0)
	pl := &Planner{Self: "us-1", Region: "us-east", Catalog: cat, Health: tr, Regions: regions, Mesh: fakeMesh{"eu-west": "eu-1"}}
	req := chatReq(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	req.Residency = region.Residency{Jurisdiction: "eu"}

	plan, err := pl.Plan(req, now)
	if err != nil || len(plan.Targets) != 2 || plan.Targets[0].Via != "eu-1" || plan.Targets[0].ViaRegion != "eu-west" || plan.Targets[1].Via != "" {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	g := Guard{Region: "us-east", Regions: regions}
	for i := range plan.Targets {
		if err := g.Check(req, &plan.Targets[i]); err != nil {
			t.Fatalf("guard refused a planned target: %v", err)
		}
	}
	// Forwarded here, the request is not forwarded again.
	req.Forwarded = true
	if plan, _ = pl.Plan(req, now); len(plan.Targets) != 1 || plan.Targets[0].Provider() != "api-us" {
		t.Fatalf("forwarded plan %v", order(plan))
	}
	req.Forwarded = false
	// Strict transit: a us node may not touch an eu tenant's request.
	req.StrictTransit = true
	if _, err := pl.Plan(req, now); !errors.Is(err, ErrNoCompliantProvider) {
		t.Fatalf("strict transit at a us node: %v", err)
	}
	pl.Self, pl.Region = "eu-1", "eu-west"
	g.Region = "eu-west"
	if plan, err = pl.Plan(req, now); err != nil || len(plan.Targets) != 2 {
		t.Fatalf("strict transit at an eu node: %v %v", order(plan), err)
	}
	// The guard refuses what a corrupted plan could hold.
	bad := Target{Offer: cat.Offers("m")[0], Via: "us-1", ViaRegion: "us-east"}
	if err := g.Check(req, &bad); !errors.Is(err, ErrNoProvider) && !errors.Is(err, ErrNoCompliantProvider) {
		t.Fatalf("guard let a via node of the wrong region through: %v", err)
	}
	req.Residency = region.Residency{Jurisdiction: "us"}
	eu := Target{Offer: cat.Offers("m")[0]}
	if err := g.Check(req, &eu); !errors.Is(err, ErrNoCompliantProvider) {
		t.Fatalf("guard let a us request reach an eu provider: %v", err)
	}
}

func TestPlannerGroupsAndAffinity(t *testing.T) {
	small := offer("small", 0.1, 0.1, "us")
	small.Models[0].Name = "mini"
	big := offer("big", 5, 5, "us")
	big.Models[0].Name = "large"
	other := offer("other", 6, 6, "us")
	other.Models[0].Name = "large"
	cat, err := NewCatalog([]Provider{small, big, other},
		Group{Name: "auto", Members: []string{"mini", "large"}, Tiers: []Tier{{MaxPromptTokens: 20, Members: []string{"mini"}}, {Members: []string{"large"}}}},
		Group{Name: "canary", Members: []string{"mini", "large"}, Weights: map[string]int{"mini": 1, "large": 9}})
	if err != nil {
		t.Fatal(err)
	}
	if names := cat.Names(); !equal(names, []string{"auto", "canary", "large", "mini"}) {
		t.Fatalf("names %v", names)
	}
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	aff := NewAffinity(100)
	pl := &Planner{Region: "r1", Catalog: cat, Health: tr, Affinity: aff}
	now := time.Unix(0, 0)
	short, err := pl.Plan(chatReq(t, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`), now)
	if err != nil || !equal(order(short), []string{"small"}) || short.Group != "auto" {
		t.Fatalf("short prompt: %v %v", order(short), err)
	}
	long, _ := pl.Plan(chatReq(t, `{"model":"auto","messages":[{"role":"user","content":"`+strings.Repeat("many words here ", 20)+`"}]}`), now)
	if !equal(order(long), []string{"big", "other"}) {
		t.Fatalf("long prompt: %v", order(long))
	}
	// Weights: sticky per session, about 1 in 10 to mini.
	toMini := 0
	for i := range 2000 {
		req := chatReq(t, `{"model":"canary","messages":[{"role":"user","content":"hi"}]}`)
		req.Session = fmt.Sprint("s", i)
		p1, _ := pl.Plan(req, now)
		p2, _ := pl.Plan(req, now)
		if p1.Targets[0].Provider() != p2.Targets[0].Provider() {
			t.Fatal("a session's weighted member changed")
		}
		if p1.Targets[0].Provider() == "small" {
			toMini++
		}
	}
	if toMini < 120 || toMini > 300 {
		t.Fatalf("%d of 2000 sessions to the 10%% member", toMini)
	}
	// Affinity: a session that was served by other stays with it while
	// other is healthy, though big is cheaper.
	req := chatReq(t, `{"model":"large","messages":[{"role":"user","content":"hi"}]}`)
	req.Session = "conv-1"
	aff.Remember("conv-1", "other")
	if p, _ := pl.Plan(req, now); p.Targets[0].Provider() != "other" || !p.Targets[0].Sticky {
		t.Fatalf("sticky order %v", order(p))
	}
	for range 5 {
		tr.Failure(Admission{provider: "other"}, now)
	}
	if p, _ := pl.Plan(req, now); !equal(order(p), []string{"big"}) {
		t.Fatalf("after other failed: %v", order(p))
	}
	// Group validation.
	for _, g := range []Group{
		{Name: "mini", Members: []string{"large"}},
		{Name: "x", Members: []string{"nope"}},
		{Name: "x", Members: []string{"mini"}, Weights: map[string]int{"large": 1}},
		{Name: "x", Members: []string{"mini", "large"}, Tiers: []Tier{{Members: []string{"mini"}}, {MaxPromptTokens: 5, Members: []string{"large"}}}},
	} {
		if _, err := NewCatalog([]Provider{small, big}, g); err == nil {
			t.Fatalf("group %+v accepted", g)
		}
	}
}
