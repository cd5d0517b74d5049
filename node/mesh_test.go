package node_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// meshFixture is several nodes in one process sharing emulated providers.
type meshFixture struct {
	nodes []*node.Node
	urls  []string
	emus  map[string]*emulator.Emulator
}

// startMesh starts n gossiping nodes (alternately in eu-west and us-east)
// in front of the providers ups, joined through the first node.
func startMesh(t *testing.T, n int, ups []upstream, edit func(i int, c *node.Config)) *meshFixture {
	t.Helper()
	return startMeshWith(t, n, ups, edit, nil)
}

// startMeshWith is startMesh with the nodes' options adjusted by opts.
func startMeshWith(t *testing.T, n int, ups []upstream, edit func(i int, c *node.Config), opts func(i int, o *node.Options)) *meshFixture {
	t.Helper()
	// One fixture node owns the emulators; the others reuse its providers.
	base := startNode(t, ups, nil)
	base.node.Kill() // only its emulators and provider sections are wanted
	m := &meshFixture{emus: base.emus}
	var cfgs []*node.Config
	for i := range n {
		cfg := baseConfig()
		cfg.Node.Name = fmt.Sprintf("node-%d", i)
		cfg.Node.Region = []string{"eu-west", "us-east"}[i%2]
		cfg.Node.Gossip = "127.0.0.1:0"
		cfg.Providers = base.cfg.Providers
		if edit != nil {
			edit(i, cfg)
		}
		cfg.Journal.Disabled = cfg.Node.DataDir == "/nonexistent"
		cfgs = append(cfgs, cfg)
	}
	m.nodes = harness.StartMesh(t, cfgs, func(i int) node.Options {
		o := node.Options{Logger: slog.New(slog.DiscardHandler), Version: "test",
			Getenv: func(k string) string { return testEnvKeys[k] }}
		if opts != nil {
			opts(i, &o)
		}
		return o
	})
	for _, nd := range m.nodes {
		m.urls = append(m.urls, "http://"+nd.HTTPAddr())
	}
	return m
}

func postTo(t *testing.T, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A provider failure observed only on node A changes the routing choice
// on node E, which never called that provider: E's first request goes to
// the healthy provider, and the failing one never hears from E.
func TestFailureSeenByOneNodeReroutesAnother(t *testing.T) {
	m := startMesh(t, 5, []upstream{
		{name: "cheap", kind: "openai", in: 0.1, out: 0.1},
		{name: "dear", kind: "openai", in: 1, out: 1},
	}, nil)
	a, e := m.urls[0], m.urls[4]
	cheap := m.emus["cheap"]
	if err := cheap.SetMode(emulator.ModeError); err != nil {
		t.Fatal(err)
	}
	// A fails on cheap until its outlier detector ejects it.
	for range 6 {
		if resp := postTo(t, a, hello); resp.StatusCode != 200 {
			t.Fatalf("A: %d", resp.StatusCode)
		}
	}
	seenBy := cheap.Stats().Requests
	took := wait.For(t, 2*time.Second, "E to rank cheap down", func() bool {
		return providerView(t, e, "cheap").Degraded
	})
	t.Logf("cheap, failing on node-0, was ranked down on node-4 %v after its ejection", took)
	resp := postTo(t, e, hello)
	if p := resp.Header.Get("X-LLMesh-Provider"); resp.StatusCode != 200 || p != "dear" {
		t.Fatalf("E: %d from %q", resp.StatusCode, p)
	}
	if route := resp.Header.Get("X-LLMesh-Route"); !strings.Contains(route, "ranked down cheap") || strings.Contains(route, "failed over") {
		t.Fatalf("E's route: %q", route)
	}
	if cheap.Stats().Requests != seenBy {
		t.Fatal("E called the provider the mesh knew was failing")
	}
}

func providerView(t *testing.T, url, name string) views.ProviderView {
	t.Helper()
	var doc struct {
		Providers []views.ProviderInfo `json:"providers"`
	}
	getJSON(t, url+"/v1/mesh/providers", "", &doc)
	for _, p := range doc.Providers {
		if p.Name == name {
			return p.View
		}
	}
	t.Fatalf("no provider %s", name)
	return views.ProviderView{}
}

func getJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// The admin API shows the members with their regions and RTTs, and each
// node's observations of each provider; the admin token guards it.
func TestMeshAdminAPI(t *testing.T) {
	testEnvKeys["LLMESH_TEST_ADMIN"] = "admin-secret"
	m := startMesh(t, 3, []upstream{{name: "p", kind: "openai"}}, func(i int, c *node.Config) {
		c.Node.AdminTokenEnv = "LLMESH_TEST_ADMIN"
	})
	url := m.urls[1]
	for _, path := range []string{"/v1/mesh/members", "/v1/mesh/providers"} {
		if code := getJSON(t, url+path, "", &struct{}{}); code != 401 {
			t.Fatalf("%s without the token: %d", path, code)
		}
		if code := getJSON(t, url+path, "wrong", &struct{}{}); code != 401 {
			t.Fatalf("%s with a wrong token: %d", path, code)
		}
	}
	var members struct{ Members []views.MemberInfo }
	wait.For(t, 10*time.Second, "RTT estimates to every peer", func() bool {
		getJSON(t, url+"/v1/mesh/members", "admin-secret", &members)
		for _, mem := range members.Members {
			if !mem.Self && mem.RTTMillis < 0 {
				return false
			}
		}
		return len(members.Members) == 3
	})
	regions := map[string]string{}
	for _, mem := range members.Members {
		regions[mem.Name] = mem.Region
		if mem.State != "alive" || mem.HTTP == "" || mem.Address == "" {
			t.Fatalf("member %+v", mem)
		}
	}
	if regions["node-0"] != "eu-west" || regions["node-1"] != "us-east" {
		t.Fatalf("regions %v", regions)
	}
	if resp := postTo(t, m.urls[0], hello); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	wait.For(t, 5*time.Second, "node-0's report to reach node-1", func() bool {
		var doc struct{ Providers []views.ProviderInfo }
		getJSON(t, url+"/v1/mesh/providers", "admin-secret", &doc)
		for _, o := range doc.Providers[0].Observers {
			if o.Observer == "node-0" && o.LatencyMillis > 0 {
				return true
			}
		}
		return false
	})
}

// One node per region probes an idle provider, with one token; the
// other nodes of the region learn the result by gossip and do not probe.
// (While the membership is still forming, a node alone in its region
// probes for it; the counts start once every node sees every other.)
func TestIdleProvidersAreProbedOncePerRegion(t *testing.T) {
	m := startMesh(t, 4, []upstream{{name: "quiet", kind: "openai", in: 1, out: 2}}, func(i int, c *node.Config) {
		c.Probes = node.ProbesSection{Idle: node.Duration(400 * time.Millisecond)}
	})
	e := m.emus["quiet"]
	probes := func() []int {
		var out []int
		for _, u := range m.urls {
			var n int
			for _, line := range strings.Split(readAll(t, mustGet(t, u+"/metrics").Body), "\n") {
				if strings.HasPrefix(line, `llmesh_probes_total{outcome="ok",provider="quiet"} `) {
					fmt.Sscan(strings.Fields(line)[1], &n)
				}
			}
			out = append(out, n)
		}
		return out
	}
	before, start := probes(), e.Stats().Requests
	wait.For(t, 10*time.Second, "two rounds of probes", func() bool { return e.Stats().Requests >= start+4 })
	after := probes()
	probers := map[string]int{}
	for i := range m.urls {
		if after[i] > before[i] {
			probers[[]string{"eu-west", "us-east"}[i%2]]++
		}
	}
	if probers["eu-west"] != 1 || probers["us-east"] != 1 {
		t.Fatalf("nodes probing per region: %v (probes before %v, after %v)", probers, before, after)
	}
	for _, rec := range e.Received() {
		if !strings.Contains(string(rec.Body), `"max_tokens":1`) {
			t.Fatalf("a probe that is not minimal: %s", rec.Body)
		}
	}
	metrics := ""
	for _, u := range m.urls {
		metrics += readAll(t, mustGet(t, u+"/metrics").Body)
	}
	spent := 0.0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, `llmesh_probe_cost_usd_total{provider="quiet"} `) {
			var v float64
			fmt.Sscan(strings.Fields(line)[1], &v)
			spent += v
		}
	}
	// Each probe: a few prompt tokens at $1/M and one completion token at $2/M.
	if spent <= 0 || spent > float64(e.Stats().Requests)*20e-6 {
		t.Fatalf("probe spend $%g for %d probes", spent, e.Stats().Requests)
	}
}

// A node whose seeds do not answer is not ready; POST /v1/mesh/join makes
// it join and ready.
func TestReadyOnlyOnceJoined(t *testing.T) {
	m := startMesh(t, 1, []upstream{{name: "p", kind: "openai"}}, nil)
	cfg := baseConfig()
	cfg.Node.Name, cfg.Node.Gossip = "late", "127.0.0.1:0"
	cfg.Node.Join = []string{closedAddr(t)}
	nd := harness.JoinNode(t, cfg, node.Options{Logger: slog.New(slog.DiscardHandler)})
	url := "http://" + nd.HTTPAddr()
	if code := getJSON(t, url+"/readyz", "", &struct{}{}); code != 503 {
		t.Fatalf("readyz before joining: %d", code)
	}
	body := fmt.Sprintf(`{"addrs":[%q]}`, m.nodes[0].Mesh().Addr())
	resp, err := http.Post(url+"/v1/mesh/join", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("join: %v %v", resp, err)
	}
	resp.Body.Close()
	if code := getJSON(t, url+"/readyz", "", &struct{}{}); code != 200 {
		t.Fatalf("readyz after joining: %d", code)
	}
	var doc struct{ Members []views.MemberInfo }
	getJSON(t, url+"/v1/mesh/members", "", &doc)
	if len(doc.Members) != 2 {
		t.Fatalf("members %+v", doc.Members)
	}
}
