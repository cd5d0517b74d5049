package route

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
)

// The data sovereignty invariant as a property: over generated topologies
// (regions, jurisdictions, reaches, replicas, nodes failing and draining,
// providers ejected and cooling down) and generated requests (residency,
// strict transit, forwarded or not, a model or a group), the planner never
// yields, and the executor never calls, a provider outside the request's
// residency, a region-reach provider from outside its region but through
// an alive, non-draining node of that region, or, with strict transit, a
// node outside the residency's jurisdiction. The executor is also handed
// corrupted plans (targets the planner would never yield) and must refuse
// every one that breaks the invariant.

// chooser is the source of every choice a case makes: a seeded generator
// for the property test, the fuzzer's bytes for the fuzz target.
type chooser interface{ IntN(n int) int }

type byteChooser struct{ b []byte }

func (c *byteChooser) IntN(n int) int {
	if len(c.b) == 0 || n <= 1 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	return v % n
}

// topology is one generated mesh.
type topology struct {
	regions   []region.Region
	regionMap *region.Map
	providers []Provider
	groups    []Group
	nodes     []meshNode // every node, any state
}

type meshNode struct {
	name, region   string
	down, draining bool
	rtt            time.Duration
}

func (tp *topology) node(name string) (meshNode, bool) {
	for _, n := range tp.nodes {
		if n.name == name {
			return n, true
		}
	}
	return meshNode{}, false
}

func (tp *topology) jurisdiction(regionName string) region.Jurisdiction {
	r, _ := tp.regionMap.Lookup(regionName)
	return r.Jurisdiction
}

// Via implements MeshView the way gossip does: the nearest alive,
// non-draining node of the region.
func (tp *topology) Via(regionName string, _ API) (string, time.Duration, bool) {
	best := -1
	for i, n := range tp.nodes {
		if n.region == regionName && !n.down && !n.draining && (best < 0 || n.rtt < tp.nodes[best].rtt) {
			best = i
		}
	}
	if best < 0 {
		return "", 0, false
	}
	return tp.nodes[best].name, tp.nodes[best].rtt, true
}

func genTopology(c chooser) *topology {
	tp := &topology{}
	nj := 1 + c.IntN(3)
	js := make([]region.Jurisdiction, nj)
	for i := range js {
		js[i] = region.Jurisdiction(fmt.Sprintf("j%d", i))
	}
	nr := 1 + c.IntN(5)
	for i := range nr {
		tp.regions = append(tp.regions, region.Region{Name: fmt.Sprintf("r%d", i), Jurisdiction: js[c.IntN(nj)]})
	}
	tp.regionMap, _ = region.NewMap(tp.regions)
	np := 1 + c.IntN(8)
	for i := range np {
		p := Provider{
			Name: fmt.Sprintf("p%d", i), Kind: KindOpenAI, Region: tp.regions[c.IntN(nr)].Name,
			Reach: ReachGlobal, BaseURL: fmt.Sprintf("http://p%d.test", i),
		}
		if c.IntN(2) == 0 {
			p.Reach = ReachRegion
		}
		// Usually the region's jurisdiction; sometimes others too, or
		// only others (a provider whose contract says so).
		switch c.IntN(4) {
		case 0:
			for _, j := range js {
				if c.IntN(2) == 0 {
					p.Jurisdictions = append(p.Jurisdictions, j)
				}
			}
		default:
			p.Jurisdictions = region.NewSet(tp.jurisdiction(p.Region))
		}
		if nrep := c.IntN(4); nrep > 1 {
			for k := range nrep {
				p.Replicas = append(p.Replicas, fmt.Sprintf("http://p%d-r%d.test", i, k))
			}
		}
		p.Models = []Model{{Name: "m", InputUSDPerMTok: float64(c.IntN(5)), OutputUSDPerMTok: float64(c.IntN(5))}}
		if c.IntN(3) == 0 {
			p.Models = append(p.Models, Model{Name: "m2", InputUSDPerMTok: 1, OutputUSDPerMTok: 1})
		}
		if c.IntN(2) == 0 {
			p.Models = append(p.Models, Model{Name: "e", InputUSDPerMTok: 1, API: APIEmbeddings})
		}
		tp.providers = append(tp.providers, p)
	}
	g := Group{Name: "auto", Members: []string{"m"}}
	for _, p := range tp.providers {
		if slices.ContainsFunc(p.Models, func(m Model) bool { return m.Name == "m2" }) {
			g.Members = append(g.Members, "m2")
			g.Weights = map[string]int{"m": c.IntN(3), "m2": c.IntN(3)}
			g.Tiers = []Tier{{MaxPromptTokens: 1 + c.IntN(50), Members: []string{"m2"}}, {Members: []string{"m", "m2"}}}
			break
		}
	}
	// Fallback by class moves a request on past refusals too, and to
	// the larger-context member: never anywhere the guard would not let
	// any retry go.
	g.FallbackOn = FallbackClass(c.IntN(16))
	if g.FallbackOn.Has(FallbackContextLength) && slices.Contains(g.Members, "m2") && c.IntN(2) == 0 {
		g.ContextFallback = []string{"m2"}
	}
	tp.groups = []Group{g}
	for i := range c.IntN(3 * nr) {
		tp.nodes = append(tp.nodes, meshNode{name: fmt.Sprintf("n%d", i), region: tp.regions[c.IntN(nr)].Name, rtt: time.Duration(1+c.IntN(200)) * time.Millisecond})
	}
	return tp
}

// randomHealth is a HealthView with providers and replicas ejected,
// cooling down or degraded at random.
type randomHealth map[string]Health

func (h randomHealth) Health(name string, _ time.Time) Health { return h[name] }

// violation returns what is wrong with calling t for req from a node of
// self, or "" when it is allowed. It is the invariant stated
// independently of the planner and the guard.
func violation(tp *topology, self string, req *Request, provider *Provider, via string) string {
	j := req.Residency.Jurisdiction
	if j != "" && !provider.Jurisdictions.Contains(j) {
		return fmt.Sprintf("%s processes in %v, residency %s", provider.Name, provider.Jurisdictions, j)
	}
	strict := req.StrictTransit && j != ""
	if strict && tp.jurisdiction(self) != j {
		return fmt.Sprintf("strict transit through this node's region %s (%s)", self, tp.jurisdiction(self))
	}
	if via == "" {
		if provider.Reach == ReachRegion && provider.Region != self {
			return fmt.Sprintf("%s called from %s, reachable only from %s", provider.Name, self, provider.Region)
		}
		return ""
	}
	n, ok := tp.node(via)
	switch {
	case req.Forwarded:
		return "a forwarded request forwarded again to " + via
	case !ok:
		return "unknown via node " + via
	case n.region != provider.Region && provider.Reach == ReachRegion:
		return fmt.Sprintf("via %s of %s for %s of %s", via, n.region, provider.Name, provider.Region)
	case strict && tp.jurisdiction(n.region) != j:
		return fmt.Sprintf("strict transit through %s in %s (%s)", via, n.region, tp.jurisdiction(n.region))
	}
	return ""
}

// recorder is the executor's way out, recorded: a RoundTripper for
// direct calls and a Forwarder for calls through a via node. Each
// answers at random: an answer, an error status, a 429, no connection,
// a content filter's refusal or a context window's.
type recorder struct {
	t       testing.TB
	mu      sync.Mutex
	c       chooser
	byHost  map[string]*Provider
	calls   []recordedCall
	tp      *topology
	chatOK  []byte
	chatErr []byte
}

type recordedCall struct {
	provider *Provider
	via      string
}

func (r *recorder) outcome() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c.IntN(6)
}

// refusals are the 400s the recorder answers, by outcome.
var refusals = map[int]string{
	4: `{"error":{"message":"filtered","type":null,"param":"prompt","code":"content_filter","status":400}}`,
	5: `{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
}

func (r *recorder) RoundTrip(hr *http.Request) (*http.Response, error) {
	p := r.byHost[hr.URL.Host]
	r.mu.Lock()
	r.calls = append(r.calls, recordedCall{provider: p})
	r.mu.Unlock()
	if p == nil {
		r.t.Errorf("call to unknown host %s", hr.URL.Host)
	}
	if hr.Body != nil {
		_, _ = io.Copy(io.Discard, hr.Body)
		hr.Body.Close()
	}
	resp := &http.Response{Header: http.Header{"Content-Type": {"application/json"}}, Request: hr}
	switch o := r.outcome(); o {
	case 4, 5:
		resp.StatusCode = 400
		resp.Body = io.NopCloser(strings.NewReader(refusals[o]))
	case 0:
		return nil, errors.New("connection refused")
	case 1:
		resp.StatusCode = 500
		resp.Body = io.NopCloser(strings.NewReader(string(r.chatErr)))
	case 2:
		resp.StatusCode = 429
		resp.Body = io.NopCloser(strings.NewReader(string(r.chatErr)))
	default:
		resp.StatusCode = 200
		ok := r.chatOK
		if strings.HasSuffix(hr.URL.Path, "/embeddings") {
			ok = propEmbOK
		}
		resp.Body = io.NopCloser(strings.NewReader(string(ok)))
	}
	return resp, nil
}

// Forward implements Forwarder as node/ does: it dials only a node it
// knows, alive, in the region the target names.
func (r *recorder) Forward(ctx context.Context, req *Request, t *Target, route string, sink ResponseSink) Forwarded {
	n, ok := r.tp.node(t.Via)
	if !ok || n.down || n.region != t.ViaRegion {
		return Forwarded{Err: errors.New("no such node in that region")}
	}
	r.mu.Lock()
	r.calls = append(r.calls, recordedCall{provider: t.Offer.Provider, via: t.Via})
	r.mu.Unlock()
	switch o := r.outcome(); o {
	case 4, 5:
		return Forwarded{Status: 400, Header: http.Header{}, Body: []byte(refusals[o]), Code: "upstream_error"}
	case 0:
		return Forwarded{Err: errors.New("connection refused")}
	case 1:
		return Forwarded{Status: 503, Code: "no_provider_available"}
	case 2:
		return Forwarded{Status: 429, Code: "rate_limited"}
	}
	sink.Header().Set("Content-Type", "application/json")
	sink.WriteHeader(200)
	_, _ = sink.Write(r.chatOK)
	return Forwarded{Committed: true, Provider: t.Provider()}
}

// nullSink discards an answer.
type nullSink struct{ h http.Header }

func (s *nullSink) Header() http.Header         { return s.h }
func (s *nullSink) WriteHeader(int)             {}
func (s *nullSink) Write(p []byte) (int, error) { return len(p), nil }
func (s *nullSink) Flush() error                { return nil }

var (
	propChatOK  = []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	propChatErr = []byte(`{"error":{"message":"no","type":"server_error"}}`)
	propEmbOK   = []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.6,0.8]}],"model":"e","usage":{"prompt_tokens":2,"total_tokens":2}}`)
	// propBodies are requests of every API: chat, completions, Messages
	// (translated into chat at the edge) and embeddings.
	propBodies = []struct {
		api  API
		body string
	}{
		{APIChat, `{"model":"m","messages":[{"role":"user","content":"hello"}]}`},
		{APIChat, `{"model":"auto","max_tokens":16,"messages":[{"role":"user","content":"a somewhat longer prompt that may or may not fit the small tier of the group"}]}`},
		{APIChat, `{"model":"m2","user":"u-1","messages":[{"role":"user","content":"hi"}]}`},
		{APICompletions, `{"model":"m","prompt":["hello","again"],"max_tokens":4}`},
		{APIMessages, `{"model":"m","max_tokens":8,"messages":[{"role":"system","content":"brief"},{"role":"user","content":"hi"}]}`},
		{APIEmbeddings, `{"model":"e","input":["a document that must stay where it may","another"]}`},
	}
)

// sovereigntyTopology generates a topology and runs cases on it.
func sovereigntyTopology(t testing.TB, c chooser, cases int, withExecutor func(i int) bool) {
	tp := genTopology(c)
	cat, err := NewCatalog(clonedProviders(tp.providers), tp.groups...)
	if err != nil {
		t.Fatalf("catalog: %v", err)
	}
	for i := range cases {
		sovereigntyCase(t, c, tp, cat, withExecutor(i))
	}
}

// sovereigntyCase generates the failures of one instant, the node
// planning and a request; plans it, checks the plan, executes it
// (sometimes corrupted) and checks every call.
func sovereigntyCase(t testing.TB, c chooser, tp *topology, cat *Catalog, withExecutor bool) {
	randomizeNodes(c, tp)
	self := tp.regions[c.IntN(len(tp.regions))].Name
	now := time.Unix(1e9, 0)
	health, replicas := randomHealths(c, cat, now)
	pb := propBodies[c.IntN(len(propBodies))]
	chat, err := pb.api.Parse([]byte(pb.body))
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Chat: chat, Session: fmt.Sprintf("s%d", c.IntN(4)), Forwarded: c.IntN(4) == 0, StrictTransit: c.IntN(3) == 0}
	if k := c.IntN(len(tp.regions) + 2); k < len(tp.regions) {
		req.Residency = region.Residency{Jurisdiction: tp.regions[k].Jurisdiction}
	} else if k == len(tp.regions) {
		req.Residency = region.Residency{Jurisdiction: "nowhere"}
	}
	var mesh MeshView
	if c.IntN(5) != 0 {
		mesh = tp
	}
	pl := &Planner{Self: "self", Region: self, Catalog: cat, Health: health, Replicas: replicas, Regions: tp.regionMap, Mesh: mesh}
	plan, err := pl.Plan(req, now)
	if plan != nil {
		for _, tg := range plan.Targets {
			if v := violation(tp, self, req, tg.Offer.Provider, tg.Via); v != "" {
				t.Fatalf("planner yielded a target breaking the invariant: %s\nrequest %+v\nplan %s", v, req, describe(plan))
			}
		}
	}
	// With no provider of the model allowed to see the data at all, the
	// answer is no_compliant_provider, whatever else is wrong.
	if err != nil && !errors.Is(err, ErrModelNotFound) && noneCompliant(tp, cat, self, req) && !errors.Is(err, ErrNoCompliantProvider) {
		t.Fatalf("no provider is compliant, yet the error is %v", err)
	}
	if err == nil && len(plan.Targets) == 0 {
		t.Fatal("a plan without targets and without an error")
	}
	if !withExecutor || plan == nil {
		return
	}
	corruptPlan(c, tp, cat, plan)
	executeChecked(t, c, tp, cat, self, req, plan, now)
}

// randomizeNodes marks some of the topology's nodes down or draining.
func randomizeNodes(c chooser, tp *topology) {
	for i := range tp.nodes {
		n := &tp.nodes[i]
		n.down, n.draining = false, false
		switch c.IntN(5) {
		case 0:
			n.down = true
		case 1:
			n.draining = true
		}
	}
}

// randomHealths makes some providers and replicas ejected, cooling down
// or degraded at now.
func randomHealths(c chooser, cat *Catalog, now time.Time) (health, replicas randomHealth) {
	health, replicas = randomHealth{}, randomHealth{}
	for _, p := range cat.Providers() {
		switch c.IntN(6) {
		case 0:
			health[p.Name] = Health{Ejected: true}
		case 1:
			health[p.Name] = Health{CoolingUntil: now.Add(time.Second)}
		case 2:
			health[p.Name] = Health{Degraded: true}
		}
		for i := range p.Replicas {
			if c.IntN(3) == 0 {
				replicas[p.ReplicaKey(i)] = Health{Ejected: true}
			}
		}
	}
	return health, replicas
}

// corruptPlan now and then inserts into plan targets for any provider,
// direct or through any node, at any position: the guard must refuse
// whichever of them break the invariant.
func corruptPlan(c chooser, tp *topology, cat *Catalog, plan *Plan) {
	if c.IntN(2) == 0 {
		for range 1 + c.IntN(3) {
			ps := cat.Providers()
			p := ps[c.IntN(len(ps))]
			tg := Target{Offer: cat.Offers(p.Models[0].Name)[0]}
			for _, o := range cat.Offers(p.Models[0].Name) {
				if o.Provider == p {
					tg.Offer = o
				}
			}
			if len(tp.nodes) > 0 && c.IntN(2) == 0 {
				n := tp.nodes[c.IntN(len(tp.nodes))]
				tg.Via, tg.ViaRegion = n.name, n.region
			}
			at := c.IntN(len(plan.Targets) + 1)
			plan.Targets = append(plan.Targets[:at], append([]Target{tg}, plan.Targets[at:]...)...)
		}
	}
}

// executeChecked executes plan with calls recorded, and fails on any
// call that breaks the invariant.
func executeChecked(t testing.TB, c chooser, tp *topology, cat *Catalog, self string, req *Request, plan *Plan, now time.Time) {
	rec := &recorder{t: t, c: c, byHost: map[string]*Provider{}, tp: tp, chatOK: propChatOK, chatErr: propChatErr}
	for _, p := range cat.Providers() {
		bases := p.Replicas
		if len(bases) == 0 {
			bases = []string{p.BaseURL}
		}
		for _, b := range bases {
			rec.byHost[strings.TrimPrefix(b, "http://")] = p
		}
	}
	cfg := DefaultExecutorConfig()
	cfg.MaxAttempts = 1 + c.IntN(8)
	ex := NewExecutor(cfg, ExecutorDeps{
		Guard: Guard{Region: self, Regions: tp.regionMap}, Tracker: NewTracker(DefaultHealthConfig(), TrackerHooks{}),
		Replicas: NewTracker(DefaultHealthConfig(), TrackerHooks{}), Tokenizer: &Tokenizer{},
		Affinity: NewAffinity(64), Forwarder: rec, Transport: rec, Clock: func() time.Time { return now },
	})
	_, _ = ex.Execute(context.Background(), req, plan, &nullSink{h: http.Header{}})
	for _, cl := range rec.calls {
		if cl.provider == nil {
			continue
		}
		if v := violation(tp, self, req, cl.provider, cl.via); v != "" {
			t.Fatalf("executor called a target breaking the invariant: %s\nrequest %+v", v, req)
		}
	}
}

// clonedProviders copies providers so each catalog owns its own (NewCatalog
// fills in rings and defaults).
func clonedProviders(ps []Provider) []Provider {
	out := make([]Provider, len(ps))
	copy(out, ps)
	for i := range out {
		out[i].Models = append([]Model(nil), ps[i].Models...)
	}
	return out
}

// noneCompliant reports whether no provider of any model the request may
// be planned with (the model, or a group's members) is allowed to see its
// data from this node, health and reach aside: the request's residency
// excludes it, or strict transit excludes this node or the provider's
// region.
func noneCompliant(tp *topology, cat *Catalog, self string, req *Request) bool {
	names := []string{req.Chat.Model}
	if g := cat.Group(req.Chat.Model); g != nil {
		names = g.Members
	}
	j := req.Residency.Jurisdiction
	strict := req.StrictTransit && j != ""
	for _, name := range names {
		for _, o := range cat.Offers(name) {
			p := o.Provider
			switch {
			case j != "" && !p.Jurisdictions.Contains(j):
			case strict && tp.jurisdiction(self) != j:
			case strict && p.Reach == ReachRegion && p.Region != self && tp.jurisdiction(p.Region) != j:
			default:
				return false
			}
		}
	}
	return true
}

func describe(p *Plan) string {
	var b strings.Builder
	for _, t := range p.Targets {
		fmt.Fprintf(&b, "%s via %q (%s); ", t.Provider(), t.Via, t.ViaRegion)
	}
	for _, s := range p.Skipped {
		fmt.Fprintf(&b, "skipped %s: %s; ", s.Provider, s.Reason)
	}
	return b.String()
}

// TestSovereigntyProperty runs 10^5 generated cases (10^4 with -short),
// ten on each of 10^4 generated topologies: every one is planned, and
// every fourth executed with random answers and corrupted plans.
func TestSovereigntyProperty(t *testing.T) {
	topologies := 10_000
	if testing.Short() {
		topologies = 1_000
	}
	rng := rand.New(rand.NewPCG(20261129, 5))
	var i int
	var seed uint64
	defer func() {
		if t.Failed() {
			t.Logf("failed on topology %d: rand.NewPCG(%d, %d)", i, seed, i)
		}
	}()
	for i = range topologies {
		seed = rng.Uint64()
		sovereigntyTopology(t, rand.New(rand.NewPCG(seed, uint64(i))), 10, func(k int) bool { return k%4 == 0 })
	}
}

// FuzzSovereignty lets the fuzzer choose the topology, the failures and
// the request byte by byte: go test ./route -fuzz FuzzSovereignty.
func FuzzSovereignty(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 3, 1, 0, 5, 7, 1, 1, 0, 2, 9, 4, 3, 3, 2, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("the residency of every request is kept in every topology"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sovereigntyTopology(t, &byteChooser{b: b}, 3, func(int) bool { return true })
	})
}
