package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// spendMesh is two voters in front of one emulated provider serving two
// models, with a budgeted tenant of two keys and an unbudgeted one.
type spendMesh struct {
	urls []string
	keys map[string]string // key → tenant
}

func startSpendMesh(t *testing.T) *spendMesh {
	t.Helper()
	prices := map[string]emulator.Price{"small": {InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.6}, "large": {InputUSDPerMTok: 2.5, OutputUSDPerMTok: 10}}
	ec := emulator.DefaultConfig()
	ec.Name, ec.Models = "p", prices
	e := harness.StartEmulator(t, ec)
	m := &spendMesh{keys: map[string]string{"sk-acme-one-0123456789": "acme", "sk-acme-two-0123456789": "acme", "sk-beta-0123456789": "beta"}}
	var cfgs []*node.Config
	for i := range 2 {
		c := &node.Config{
			Node: node.NodeSection{Name: fmt.Sprintf("spend-%d", i), Region: "eu-west", DataDir: t.TempDir(), HTTP: "127.0.0.1:0",
				Gossip: "127.0.0.1:0", RPC: "127.0.0.1:0", Raft: "127.0.0.1:0", Voter: true, BootstrapExpect: 2,
				Drain: node.DrainSection{Grace: node.Duration(time.Millisecond)}},
			Regions: []node.RegionSection{{Name: "eu-west", Jurisdiction: "eu"}},
			Providers: []node.ProviderSection{{Name: "p", Kind: "openai", Region: "eu-west", BaseURL: e.URL(), MetricsPath: "off",
				Models: []node.ModelSection{{Name: "small", InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.6}, {Name: "large", InputUSDPerMTok: 2.5, OutputUSDPerMTok: 10}}}},
			Tenants: []node.TenantSection{
				{Name: "acme", KeySHA256: []string{harness.KeySHA256("sk-acme-one-0123456789"), harness.KeySHA256("sk-acme-two-0123456789")},
					Budget: &node.BudgetSection{USD: 100, Period: "total"}},
				{Name: "beta", KeySHA256: []string{harness.KeySHA256("sk-beta-0123456789")}},
			},
			Probes: node.ProbesSection{Disabled: true},
			Audit:  node.AuditSection{Disabled: true},
		}
		cfgs = append(cfgs, c)
	}
	nodes := harness.StartMesh(t, cfgs, func(int) node.Options {
		return node.Options{Version: "test", LedgerTuning: func(c *consensus.ServerConfig) { c.Timings = consensus.FastTimings }}
	})
	for _, n := range nodes {
		m.urls = append(m.urls, "http://"+n.HTTPAddr())
	}
	return m
}

var commentCost = regexp.MustCompile(`(?m)^: X-LLMesh-Cost: ([0-9.]+)$`)

// send posts one chat request and returns what its answer says it cost,
// in nano-dollars.
func (m *spendMesh) send(t *testing.T, url, key, body string, hdr ...string) int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	cost := resp.Header.Get("X-LLMesh-Cost")
	if c := commentCost.FindSubmatch(b); c != nil {
		cost = string(c[1])
	}
	f, err := strconv.ParseFloat(cost, 64)
	if err != nil {
		t.Fatalf("no cost on the answer: %q", cost)
	}
	return int64(math.Round(f * 1e9))
}

// spendOf runs `llmesh spend` against url and decodes its -json.
func spendOf(t *testing.T, url string, args ...string) views.Spend {
	t.Helper()
	var v views.Spend
	out := runCLI(t, append([]string{"spend", "-addr", url, "-json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("llmesh spend -json: %v\n%s", err, out)
	}
	return v
}

// Traffic with mixed tags (the header, metadata.tags, both, none), two
// keys of a budgeted tenant and an unbudgeted tenant, two models,
// whole and streamed, through both nodes of a mesh: `llmesh spend` by
// tag, key, model and tenant adds up to what the answers said they cost
// and to what the ledger settled of the budgeted tenant's books; a
// request's cost counts once, under its set of tags.
func TestSpendAddsUpAcrossTheMesh(t *testing.T) {
	m := startSpendMesh(t)
	want := map[string]int64{} // "tenant/tags" → nano-dollars
	wantKey := map[string]int64{}
	var total, acme int64
	keys := []string{"sk-acme-one-0123456789", "sk-acme-two-0123456789", "sk-beta-0123456789"}
	for i := range 24 {
		key, model := keys[i%3], []string{"small", "large"}[i%2]
		stream := ""
		if i%4 == 3 {
			stream = `"stream":true,`
		}
		var tags, hdr, meta string
		switch i % 4 {
		case 0:
			tags, hdr = "team:a", "team:a"
		case 1:
			tags, meta = "app=x,team:b", `,"metadata":{"tags":"team:b,app=x","note":"kept"}`
		case 2:
			tags, hdr, meta = "app=y,team:a", "team:a", `,"metadata":{"tags":"app=y"}`
		}
		body := fmt.Sprintf(`{"model":%q,%s"max_tokens":%d,"messages":[{"role":"user","content":"spend %d"}]%s}`, model, stream, 5+i, i, meta)
		n := m.send(t, m.urls[i%2], key, body, "X-LLMesh-Tags", hdr)
		tenant := m.keys[key]
		if tags == "" {
			tags = consensus.SpendUntagged
		}
		want[tenant+"/"+tags] += n
		wantKey[tenant+"/"+harness.KeySHA256(key)[:12]] += n
		total += n
		if tenant == "acme" {
			acme += n
		}
	}
	// Reports reach the ledger within a sync or two.
	var byTag views.Spend
	wait.For(t, 10*time.Second, "every node's spend to be reported", func() bool {
		byTag = spendOf(t, m.urls[1], "-by", "tag")
		return byTag.TotalNanos == total
	})
	got := map[string]int64{}
	var sum int64
	for _, r := range byTag.Rows {
		got[r.Tenant+"/"+r.Name] = r.Nanos
		sum += r.Nanos
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || sum != total || byTag.Requests != 24 {
		t.Fatalf("by tag %v (sum %d of %d), want %v", got, sum, byTag.TotalNanos, want)
	}
	// The budgeted tenant's books settled exactly what its rows add up to.
	var books views.Budgets
	if _, err := (&adminClient{addr: m.urls[0], http: http.DefaultClient}).do(http.MethodGet, "/v1/mesh/budgets", nil, &books); err != nil {
		t.Fatal(err)
	}
	acmeTags := spendOf(t, m.urls[0], "-by", "tag", "-tenant", "acme")
	if len(books.Budgets) != 1 || int64(math.Round(books.Budgets[0].SettledUSD*1e9)) != acme || acmeTags.TotalNanos != acme {
		t.Fatalf("acme settled %+v, its spend by tag %d, its answers %d", books.Budgets, acmeTags.TotalNanos, acme)
	}
	for _, by := range []string{"key", "model", "provider", "tenant"} {
		v := spendOf(t, m.urls[0], "-by", by)
		var s int64
		for _, r := range v.Rows {
			s += r.Nanos
		}
		if s != total || v.TotalNanos != total {
			t.Fatalf("by %s: rows add up to %d, the total is %d, the answers %d", by, s, v.TotalNanos, total)
		}
		if by == "key" {
			for _, r := range v.Rows {
				if wantKey[r.Tenant+"/"+r.Name] != r.Nanos {
					t.Fatalf("by key: %s/%s %d, want %d", r.Tenant, r.Name, r.Nanos, wantKey[r.Tenant+"/"+r.Name])
				}
			}
		}
		if by == "model" && len(v.Rows) != 4 {
			t.Fatalf("by model: %d rows, want small and large for each tenant", len(v.Rows))
		}
	}
	// The table says the same, and how tags add up.
	table := runCLI(t, "spend", "-addr", m.urls[0], "-by", "tag")
	if !strings.Contains(table, "TOTAL") || !strings.Contains(table, fmt.Sprintf("$%d.%09d", total/1e9, total%1e9)) ||
		!strings.Contains(table, "counts once, under its set of tags") || !strings.Contains(table, "app=x,team:b") {
		t.Fatalf("llmesh spend -by tag:\n%s", table)
	}
}

// The spend table names a key by its label where the ledger has one, adds
// the rows up to a total, and says how tag sets count.
func TestVerbSpendTable(t *testing.T) {
	addr := fakeNode(t, map[string]string{"/v1/mesh/spend": `{"by":"key","step":"hour","from":"2026-12-01T10:00:00Z",
		"until":"2026-12-01T12:30:00Z","total_usd":0.0000015,"total_nanos":1500,"requests":3,"consistency":"linearizable","series":[],
		"rows":[{"tenant":"acme","name":"0123456789ab","label":"app-a","usd":0.000001,"nanos":1000,"requests":2,"share":0.6667},
		{"tenant":"acme","name":"ba9876543210","usd":0.0000005,"nanos":500,"requests":1,"share":0.3333}]}`})
	out := runCLI(t, "spend", "-addr", addr, "-by", "key")
	for _, re := range []string{`TENANT +KEY +USD +REQUESTS +SHARE`, `acme +app-a \(0123456789ab\) +\$0\.000001000 +2 +66\.7%`,
		`acme +ba9876543210 +\$0\.000000500 +1 +33\.3%`, `TOTAL +\$0\.000001500 +3`, `linearizable read`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("spend table lacks %s:\n%s", re, out)
		}
	}
}
