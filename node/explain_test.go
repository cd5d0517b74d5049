package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
)

// POST /v1/route/explain returns the plan a request would get, why each
// provider was kept or dropped, and sends nothing.
func TestExplain(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "cheap-us", kind: "openai", in: 0.1, out: 0.1, juris: []string{"us"}},
		{name: "dear-eu", kind: "openai", in: 1, out: 1, juris: []string{"eu"}},
		{name: "big-eu", kind: "openai", in: 5, out: 5, juris: []string{"eu"}, models: []string{"gpt-4o"}},
	}, func(c *node.Config) {
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "acme-eu", KeySHA256: []string{sha(euKey)}, Residency: "eu"})
		c.Groups = []node.GroupSection{{Name: "auto", Members: []string{"gpt-4o-mini", "gpt-4o"},
			Tiers: []node.TierSection{{MaxPromptTokens: 50, Members: []string{"gpt-4o-mini"}}, {Members: []string{"gpt-4o"}}}}}
	})
	explain := func(key, body string) views.Explanation {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/route/explain", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e views.Explanation
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&e) != nil {
			t.Fatalf("explain: %d", resp.StatusCode)
		}
		return e
	}
	e := explain(euKey, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)
	if e.Group != "auto" || e.Residency != "eu" || len(e.Targets) != 1 || e.Targets[0].Provider != "dear-eu" || e.Targets[0].Model != "gpt-4o-mini" {
		t.Fatalf("explanation %+v", e)
	}
	if len(e.Dropped) != 1 || e.Dropped[0].Provider != "cheap-us" || !e.Dropped[0].Residency || len(e.Targets[0].Why) == 0 || e.Route == "" {
		t.Fatalf("dropped %+v, why %v", e.Dropped, e.Targets[0].Why)
	}
	long := explain(euKey, `{"model":"auto","messages":[{"role":"user","content":"`+strings.Repeat("a long prompt ", 40)+`"}]}`)
	if len(long.Targets) != 1 || long.Targets[0].Provider != "big-eu" || !strings.Contains(long.GroupChoice, "any prompt") {
		t.Fatalf("long prompt: %+v", long)
	}
	e = explain(testKey, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`)
	if len(e.Targets) != 2 || e.Targets[0].Provider != "cheap-us" || e.Targets[0].Rank != 1 {
		t.Fatalf("unrestricted tenant: %+v", e.Targets)
	}
	e = explain(euKey, `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`)
	if e.Error == nil || e.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %+v", e.Error)
	}
	for name, emu := range f.emus {
		if emu.Stats().Requests != 0 {
			t.Fatalf("explain sent a request to %s", name)
		}
	}
	// /v1/models lists the group.
	req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+euKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp.Body); !strings.Contains(body, `"auto"`) {
		t.Fatalf("models: %s", body)
	}
	// A request to the group is served by the tier's model, and says so.
	r := f.post(`{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)
	if r.StatusCode != 200 || !strings.Contains(r.Header.Get("X-LLMesh-Route"), "group auto (tier up to 50 prompt tokens)") {
		t.Fatalf("%d route %q", r.StatusCode, r.Header.Get("X-LLMesh-Route"))
	}
}

// A group naming a model nobody serves fails at start, naming the field.
func TestGroupConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		g    node.GroupSection
		want string
	}{
		{node.GroupSection{Name: "auto", Members: []string{"gpt-5"}}, `groups[0]: member "gpt-5" is not a model any provider serves`},
		{node.GroupSection{Name: "gpt-4o-mini", Members: []string{"gpt-4o-mini"}}, `groups[0]: "gpt-4o-mini" is also a model's name`},
		{node.GroupSection{Name: "auto"}, "groups[0].members: at least one model is required"},
		{node.GroupSection{Name: "auto", Members: []string{"gpt-4o-mini"}, Weights: map[string]int{"x": 1}}, `groups[0]: weights: "x" is not one of the group's members`},
	} {
		cfg := baseConfig()
		cfg.Providers = []node.ProviderSection{{Name: "p", Region: "eu-west", BaseURL: "http://127.0.0.1:1",
			Models: []node.ModelSection{{Name: "gpt-4o-mini"}}}}
		cfg.Groups = []node.GroupSection{tc.g}
		if _, err := node.New(cfg, node.Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
