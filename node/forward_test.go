package node_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/pki"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

const (
	euKey = "sk-tenant-eu-0123456789"
	usKey = "sk-tenant-us-0123456789"
)

// regionsFixture is three nodes in three regions (eu, us, ap) sharing
// emulated providers: a GPU cluster in eu and one in ap that only their
// own region reaches, a global Azure OpenAI in the eu jurisdiction and a
// global OpenAI in the us jurisdiction.
type regionsFixture struct {
	nodes map[string]*node.Node // by region: eu, us, ap
	urls  map[string]string
	emus  map[string]*emulator.Emulator
	// providers are the provider sections every node is given.
	providers []node.ProviderSection
	// logs are each node's request log lines, JSON, by region.
	logs map[string]*syncBuffer
}

// syncBuffer is a log sink that tests read while nodes write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func regionsUpstreams(gpuEU emulator.Config) []upstream {
	return []upstream{
		{name: "gpu-eu", kind: "openai", in: 0.05, out: 0.1, region: "eu-west", reach: "region", juris: []string{"eu"}, emu: gpuEU},
		{name: "azure-eu", kind: "azure", in: 0.15, out: 0.6, region: "eu-west", reach: "global", juris: []string{"eu"}},
		{name: "openai-us", kind: "openai", in: 0.15, out: 0.6, region: "us-east", reach: "global", juris: []string{"us"}},
		{name: "gpu-ap", kind: "openai", in: 0.05, out: 0.1, region: "ap-south", reach: "region", juris: []string{"ap"}},
	}
}

func withRegions(c *node.Config) {
	c.Regions = []node.RegionSection{
		{Name: "eu-west", Jurisdiction: "eu"}, {Name: "us-east", Jurisdiction: "us"}, {Name: "ap-south", Jurisdiction: "ap"},
	}
	c.Tenants = append(c.Tenants,
		node.TenantSection{Name: "acme-eu", KeySHA256: []string{sha(euKey)}, Residency: "eu"},
		node.TenantSection{Name: "acme-us", KeySHA256: []string{sha(usKey)}, Residency: "us"})
}

func startRegions(t testing.TB, ups []upstream, edit func(region string, c *node.Config)) *regionsFixture {
	t.Helper()
	base := startNode(t, ups, withRegions)
	base.node.Kill() // only its emulators and provider sections are wanted
	f := &regionsFixture{nodes: map[string]*node.Node{}, urls: map[string]string{}, emus: base.emus, providers: base.cfg.Providers,
		logs: map[string]*syncBuffer{}}
	regions := []struct{ short, name string }{{"eu", "eu-west"}, {"us", "us-east"}, {"ap", "ap-south"}}
	var cfgs []*node.Config
	for _, r := range regions {
		cfg := baseConfig()
		withRegions(cfg)
		cfg.Node.Name = r.short + "-1"
		cfg.Node.Region = r.name
		cfg.Node.Gossip = "127.0.0.1:0"
		cfg.Node.RPC = "127.0.0.1:0"
		cfg.Providers = base.cfg.Providers
		if edit != nil {
			edit(r.short, cfg)
		}
		f.logs[r.short] = &syncBuffer{}
		cfgs = append(cfgs, cfg)
	}
	nodes := harness.StartMesh(t, cfgs, func(i int) node.Options { return testOptions(f.logs[regions[i].short]) })
	for i, r := range regions {
		f.nodes[r.short] = nodes[i]
		f.urls[r.short] = "http://" + nodes[i].HTTPAddr()
	}
	wait.For(t, 30*time.Second, "every node to see the others with their RPC addresses", func() bool {
		for _, nd := range f.nodes {
			ok := 0
			for _, m := range nd.Mesh().Members() {
				if m.State == "alive" && m.Meta.RPC != "" {
					ok++
				}
			}
			if ok != 3 || !nd.Ready() {
				return false
			}
		}
		return true
	})
	return f
}

// startConfigured starts a node with cfg, stopped when the test ends.
func startConfigured(t testing.TB, cfg *node.Config) *node.Node { return startLogged(t, cfg, nil) }

// startLogged is startConfigured with the node's info lines, JSON, also
// written to requests.
func startLogged(t testing.TB, cfg *node.Config, requests io.Writer) *node.Node {
	t.Helper()
	return harness.JoinNode(t, cfg, testOptions(requests))
}

// testOptions are a test node's options: the test's environment, and
// with requests not nil its info lines, JSON, written there (nil: the
// kit's logger).
func testOptions(requests io.Writer) node.Options {
	o := node.Options{Version: "test", Getenv: func(k string) string { return testEnvKeys[k] }}
	if requests != nil {
		o.Logger = slog.New(slog.NewJSONHandler(requests, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

func (f *regionsFixture) requests() map[string]int64 {
	out := map[string]int64{}
	for name, e := range f.emus {
		out[name] = e.Stats().Requests
	}
	return out
}

func regionClient(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// An eu tenant's request arriving at the us node is served by the eu GPU
// cluster through the eu node; a us tenant at the eu node uses the global
// us provider directly; with every eu provider down, the eu tenant gets
// 503 no_compliant_provider and no us or ap provider ever hears of it.
func TestForwardAcrossRegions(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	ctx := context.Background()
	before := f.requests()

	// eu tenant at the us node, unstreamed and streamed.
	eu := regionClient(f.urls["us"], euKey)
	var hdr *http.Response
	resp, err := eu.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Bonjour")}, MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Header.Get("X-LLMesh-Node") != "us-1" || hdr.Header.Get("X-LLMesh-Provider") != "gpu-eu" || hdr.Header.Get("X-LLMesh-Via") != "eu-1" {
		t.Fatalf("headers: node %q provider %q via %q", hdr.Header.Get("X-LLMesh-Node"), hdr.Header.Get("X-LLMesh-Provider"), hdr.Header.Get("X-LLMesh-Via"))
	}
	if r := hdr.Header.Get("X-LLMesh-Route"); !strings.Contains(r, "via eu-1") || !strings.Contains(r, "at eu-1:") {
		t.Fatalf("route %q", r)
	}
	if resp.Usage.CompletionTokens != 8 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("answer %+v", resp)
	}
	stream := eu.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Bonjour")}, MaxTokens: openai.Int(16),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithResponseInto(&hdr))
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if hdr.Header.Get("X-LLMesh-Via") != "eu-1" || acc.Usage.CompletionTokens != 16 || chunks < 16 {
		t.Fatalf("stream via %q: %d chunks, usage %+v", hdr.Header.Get("X-LLMesh-Via"), chunks, acc.Usage)
	}
	after := f.requests()
	if after["gpu-eu"]-before["gpu-eu"] != 2 {
		t.Fatalf("gpu-eu got %d requests, want 2", after["gpu-eu"]-before["gpu-eu"])
	}
	for _, p := range []string{"azure-eu", "openai-us", "gpu-ap"} {
		if after[p] != before[p] {
			t.Fatalf("%s got the eu tenant's request", p)
		}
	}

	// us tenant at the eu node: the global us provider, called directly.
	us := regionClient(f.urls["eu"], usKey)
	if _, err := us.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4),
	}, option.WithResponseInto(&hdr)); err != nil {
		t.Fatal(err)
	}
	if hdr.Header.Get("X-LLMesh-Provider") != "openai-us" || hdr.Header.Get("X-LLMesh-Via") != "eu-1" || hdr.Header.Get("X-LLMesh-Node") != "eu-1" {
		t.Fatalf("us tenant at eu: provider %q via %q", hdr.Header.Get("X-LLMesh-Provider"), hdr.Header.Get("X-LLMesh-Via"))
	}

	// Every eu provider goes down. Until the nodes have ejected them the
	// eu tenant sees their failures (502); then no_compliant_provider
	// (503). Never an answer from elsewhere.
	for _, p := range []string{"gpu-eu", "azure-eu"} {
		if err := f.emus[p].Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before = f.requests()
	var last string
	wait.For(t, 20*time.Second, "the eu tenant to get no_compliant_provider", func() bool {
		resp := postAs(t, f.urls["us"], euKey, hello)
		body := readAll(t, resp.Body)
		switch {
		case resp.StatusCode == 503 && strings.Contains(body, `"no_compliant_provider"`):
			return true
		case resp.StatusCode != 502 && resp.StatusCode != 503:
			t.Fatalf("eu tenant with eu providers down: %d %s", resp.StatusCode, body)
		}
		last = body
		return false
	})
	t.Logf("before the ejections: %s", strings.TrimSpace(last))
	if m := readAll(t, mustGet(t, f.urls["us"]+"/metrics").Body); !strings.Contains(m, `llmesh_residency_refusals_total{reason="no_compliant_provider"}`) {
		t.Fatal("the refusal is not in llmesh_residency_refusals_total")
	}
	after = f.requests()
	for _, p := range []string{"openai-us", "gpu-ap"} {
		if after[p] != before[p] {
			t.Fatalf("%s received %d of the eu tenant's requests", p, after[p]-before[p])
		}
	}
}

func postAs(t *testing.T, url, key, body string, hdr ...string) *http.Response {
	t.Helper()
	return postPath(t, url+"/v1/chat/completions", key, body, hdr...)
}

// postPath posts body to url with key, and the headers hdr (name, value,
// ...).
func postPath(t *testing.T, url, key, body string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A client that disconnects mid-stream stops the upstream stream on the
// far node: the GPU cluster sees its request end within the bound.
// TestRequestIDInBothNodesLogs follows a forwarded request by its id: the
// client's X-Request-Id, or one the node makes, comes back on the answer
// and is in the request line of the node the client called and of the
// node that called the provider. Neither line holds the prompt or a key.
func TestRequestIDInBothNodesLogs(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	eu := regionClient(f.urls["us"], euKey)
	const prompt = "the secret recipe is 42 cloves of garlic"
	for _, given := range []string{"trace-7f3a-forwarded", ""} {
		var hdr *http.Response
		opts := []option.RequestOption{option.WithResponseInto(&hdr)}
		if given != "" {
			opts = append(opts, option.WithHeader("X-Request-Id", given))
		}
		if _, err := eu.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(4),
		}, opts...); err != nil {
			t.Fatal(err)
		}
		id := hdr.Header.Get("X-Request-Id")
		if (given != "" && id != given) || (given == "" && len(id) < 16) {
			t.Fatalf("X-Request-Id %q, sent %q", id, given)
		}
		if hdr.Header.Get("X-LLMesh-Via") != "eu-1" {
			t.Fatalf("not forwarded: via %q", hdr.Header.Get("X-LLMesh-Via"))
		}
		lines := map[string]map[string]any{}
		wait.For(t, 10*time.Second, "the request line in both nodes' logs", func() bool {
			for _, region := range []string{"us", "eu"} {
				for _, l := range strings.Split(f.logs[region].String(), "\n") {
					var m map[string]any
					if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["request_id"] == id {
						lines[region] = m
					}
				}
			}
			return len(lines) == 2
		})
		origin, far := lines["us"], lines["eu"]
		if origin["forwarded_by"] != nil || far["forwarded_by"] != "us-1" {
			t.Fatalf("forwarded_by: origin %v, far %v", origin["forwarded_by"], far["forwarded_by"])
		}
		for region, m := range lines {
			if m["tenant"] != "acme-eu" || m["provider"] != "gpu-eu" || m["outcome"] != "ok" || m["model"] != "gpt-4o-mini" {
				t.Fatalf("%s's line: %v", region, m)
			}
		}
	}
	for region, b := range f.logs {
		if out := b.String(); strings.Contains(out, "garlic") || strings.Contains(out, euKey) || strings.Contains(out, usKey) {
			t.Fatalf("%s's log holds the prompt or a tenant key", region)
		}
	}
}

func TestForwardCancelReachesFarProvider(t *testing.T) {
	slow := emulator.DefaultConfig()
	slow.Name, slow.TPS, slow.TTFT = "gpu-eu", 20, 10*time.Millisecond
	f := startRegions(t, regionsUpstreams(slow), nil)
	gpu := f.emus["gpu-eu"]
	const bound = time.Second
	var took []time.Duration
	for range 5 {
		req, _ := http.NewRequest(http.MethodPost, f.urls["us"]+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"max_tokens":2000,"messages":[{"role":"user","content":"tell me a long story"}]}`))
		req.Header.Set("Authorization", "Bearer "+euKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("X-LLMesh-Via") != "eu-1" {
			t.Fatalf("via %q", resp.Header.Get("X-LLMesh-Via"))
		}
		rd := bufio.NewReader(resp.Body)
		for range 3 { // a few events, then the client goes
			if _, err := rd.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		if gpu.Stats().InFlight != 1 {
			t.Fatalf("gpu-eu has %d in flight", gpu.Stats().InFlight)
		}
		resp.Body.Close()
		// Polled every millisecond, for the figure.
		took = append(took, wait.Every(time.Millisecond).For(t, 10*time.Second, "the far provider's stream to end",
			func() bool { return gpu.Stats().InFlight == 0 }))
	}
	slices.Sort(took)
	t.Logf("client gone -> far upstream stream closed: median %v, max %v (bound %v)", took[len(took)/2], took[len(took)-1], bound)
	if took[len(took)/2] > bound {
		t.Fatalf("median %v over the bound %v", took[len(took)/2], bound)
	}
	if s := gpu.Stats(); s.StreamsCompleted != 0 {
		t.Fatalf("%d streams ran to completion", s.StreamsCompleted)
	}
}

// The receiving node never trusts the sender's view of the tenant: here
// the us node's configuration wrongly lets the eu tenant go anywhere and
// forwards it to the ap node for the ap GPU cluster; the ap node, which
// knows the tenant is eu, refuses, and the request fails over to the eu
// cluster through the eu node.
func TestForwardReceiverRechecksResidency(t *testing.T) {
	ups := []upstream{
		{name: "gpu-ap", kind: "openai", in: 0.05, out: 0.1, region: "ap-south", reach: "region", juris: []string{"ap"}, models: []string{"llama"}, priority: -1},
		{name: "gpu-eu", kind: "openai", in: 0.05, out: 0.1, region: "eu-west", reach: "region", juris: []string{"eu"}, models: []string{"llama"}},
	}
	f := startRegions(t, ups, func(region string, c *node.Config) {
		if region == "us" {
			for i := range c.Tenants {
				if c.Tenants[i].Name == "acme-eu" {
					c.Tenants[i].Residency = ""
				}
			}
		}
	})
	resp := postAs(t, f.urls["us"], euKey, `{"model":"llama","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`)
	body := readAll(t, resp.Body)
	route := resp.Header.Get("X-LLMesh-Route")
	t.Logf("%d from %s via %s; route: %s", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"), resp.Header.Get("X-LLMesh-Via"), route)
	if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Provider") != "gpu-eu" || resp.Header.Get("X-LLMesh-Via") != "eu-1" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(route, "failed over from gpu-ap via ap-1 (503)") {
		t.Fatalf("route %q does not show the ap node's refusal", route)
	}
	if n := f.emus["gpu-ap"].Stats().Requests; n != 0 {
		t.Fatalf("the ap GPU cluster got %d requests of an eu tenant", n)
	}
}

// writeCerts writes a CA and certificates for names into a directory and
// returns each node's TLS section.
func writeCerts(t *testing.T, names ...string) map[string]*node.TLSSection {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.Cert, 0o644); err != nil {
		t.Fatal(err)
	}
	out := map[string]*node.TLSSection{}
	for _, n := range names {
		p, err := pki.NewNodeCert(ca, n, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		sec := &node.TLSSection{CAFile: caFile, CertFile: filepath.Join(dir, n+".pem"), KeyFile: filepath.Join(dir, n+"-key.pem")}
		if err := os.WriteFile(sec.CertFile, p.Cert, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sec.KeyFile, p.Key, 0o600); err != nil {
			t.Fatal(err)
		}
		out[n] = sec
	}
	return out
}

// With node.tls, nodes forward to each other over mutual TLS; a node
// whose certificate another CA signed is in the gossip pool but cannot
// forward: its requests fail over to what it can call itself.
func TestForwardOverMutualTLS(t *testing.T) {
	certs := writeCerts(t, "eu-1", "us-1", "ap-1")
	f := startRegions(t, regionsUpstreams(emulator.Config{}), func(region string, c *node.Config) {
		c.Node.TLS = certs[region+"-1"]
	})
	resp := postAs(t, f.urls["us"], euKey, hello)
	if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Via") != "eu-1" || resp.Header.Get("X-LLMesh-Provider") != "gpu-eu" {
		t.Fatalf("over TLS: %d via %q from %q", resp.StatusCode, resp.Header.Get("X-LLMesh-Via"), resp.Header.Get("X-LLMesh-Provider"))
	}

	rogueCert := writeCerts(t, "us-2")["us-2"] // a CA of its own
	cfg := baseConfig()
	withRegions(cfg)
	cfg.Node.Name, cfg.Node.Region = "us-2", "us-east"
	cfg.Node.Gossip, cfg.Node.RPC = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Node.Join = []string{f.nodes["eu"].Mesh().Addr()}
	cfg.Node.TLS = rogueCert
	cfg.Providers = f.providers
	rogue := startConfigured(t, cfg)
	wait.For(t, 20*time.Second, "the rogue node to join the gossip pool", func() bool { return rogue.Ready() })
	gpuBefore := f.emus["gpu-eu"].Stats().Requests
	resp = postAs(t, "http://"+rogue.HTTPAddr(), euKey, hello)
	route := resp.Header.Get("X-LLMesh-Route")
	t.Logf("at the rogue node: %d from %s; %s", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"), route)
	if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Provider") != "azure-eu" || !strings.Contains(route, "failed over from gpu-eu via eu-1") {
		t.Fatalf("rogue: %d from %q, route %q", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"), route)
	}
	if f.emus["gpu-eu"].Stats().Requests != gpuBefore {
		t.Fatal("a node without a valid certificate had the eu GPU cluster called")
	}
}

// Session affinity through a node: a provider with four replicas (four
// emulators); each session's turns land on one replica, named by
// X-LLMesh-Replica; when a replica fails, only its sessions move.
func TestReplicaAffinityThroughNode(t *testing.T) {
	var emus []*emulator.Emulator
	var replicas []string
	for i := range 4 {
		ec := emulator.DefaultConfig()
		ec.Name = fmt.Sprintf("replica-%d", i)
		ec.Latency, ec.TTFT = 0, 0
		e, err := emulator.New(ec)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
		emus = append(emus, e)
		replicas = append(replicas, e.URL())
	}
	cfg := baseConfig()
	cfg.Providers = []node.ProviderSection{{Name: "gpu", Region: "eu-west", Reach: "region", BaseURL: replicas[0], Replicas: config.ReplicaURLs(replicas...),
		Models: []node.ModelSection{{Name: "llama", InputUSDPerMTok: 0.05, OutputUSDPerMTok: 0.1}}}}
	cfg.Outlier.ConsecutiveFailures = 2
	nd := startConfigured(t, cfg)
	url := "http://" + nd.HTTPAddr()
	const sessions, turns = 100, 3
	home := map[string]string{}
	turn := func(s string) string {
		resp := postTo(t, url, `{"model":"llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "X-LLMesh-Session", s)
		if resp.StatusCode != 200 {
			t.Fatalf("session %s: %d", s, resp.StatusCode)
		}
		return resp.Header.Get("X-LLMesh-Replica")
	}
	for k := range turns {
		for i := range sessions {
			s := fmt.Sprintf("conv-%d", i)
			r := turn(s)
			if k == 0 {
				home[s] = r
			} else if r != home[s] {
				t.Fatalf("%s moved from %s to %s on turn %d", s, home[s], r, k)
			}
		}
	}
	// Explain and X-LLMesh-Route say why the session's replica: the
	// prefix policy expects its (short) prompt cached there.
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/route/explain", strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("X-LLMesh-Session", "conv-7")
	var e views.Explanation
	if resp, err := http.DefaultClient.Do(req); err != nil || json.NewDecoder(resp.Body).Decode(&e) != nil {
		t.Fatalf("explain: %v", err)
	}
	if c := e.Targets[0].ReplicaChoice; e.Targets[0].Replica != home["conv-7"] || c == nil || c.Policy != "prefix" ||
		c.Reason != "predicted_ttft" || c.CachedTokens == 0 || len(e.Targets) != 4 {
		t.Fatalf("explain: %+v, first choice %+v", e.Targets, c)
	}
	if r := postTo(t, url, `{"model":"llama","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "X-LLMesh-Session", "conv-7"); !strings.Contains(r.Header.Get("X-LLMesh-Route"), "replica "+home["conv-7"]+" by prefix") {
		t.Fatalf("X-LLMesh-Route: %s", r.Header.Get("X-LLMesh-Route"))
	}
	per := map[string]int{}
	for _, r := range home {
		per[r]++
	}
	t.Logf("sessions per replica: %v", per)
	if len(per) != 4 {
		t.Fatalf("sessions on %d replicas", len(per))
	}
	for i := range 4 { // named, not addressed: their addresses stay inside
		if name := fmt.Sprintf("gpu/%d", i); per[name] == 0 {
			t.Fatalf("no session on replica %s: %v", name, per)
		}
	}
	// Replica 0 fails: its sessions move (after the failures that eject
	// it, each failed over within its request), and no other.
	gone := "gpu/0" // replicas[0]
	if err := emus[0].Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i := range sessions {
		s := fmt.Sprintf("conv-%d", i)
		r := turn(s)
		switch {
		case home[s] == gone && r == gone:
			t.Fatalf("%s still on the failed replica", s)
		case home[s] != gone && r != home[s]:
			t.Fatalf("%s moved from healthy %s to %s", s, home[s], r)
		}
		if r != home[s] {
			moved++
		}
	}
	t.Logf("replica %s failed: %d of %d sessions moved, all of them its own", gone, moved, sessions)
	if moved != per[gone] {
		t.Fatalf("moved %d, the failed replica held %d", moved, per[gone])
	}
}
