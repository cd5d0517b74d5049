package node_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
)

const testKey = "sk-test-0123456789abcdef"

// upstream describes one emulated provider of a test node.
type upstream struct {
	name       string
	kind       string // openai | azure | anthropic | vllm ...
	in, out    float64
	priority   int
	models     []string // default: gpt-4o-mini
	embeddings []string // embedding models, priced at in per million input tokens
	emu        emulator.Config
	rpm        int
	apiKey     string
	juris      []string
	region     string
	reach      string
	noEmulator bool // base_url points at a closed port
	scrape     bool // a vllm, sglang or tgi kind's metrics are scraped
}

// fixture is one node in front of emulated providers, all on loopback.
type fixture struct {
	t    testing.TB
	node *node.Node
	url  string
	emus map[string]*emulator.Emulator
	cfg  *node.Config
}

// testEnvKeys are environment variables every test node sees.
var testEnvKeys = map[string]string{}

func sha(key string) string { return harness.KeySHA256(key) }

func baseConfig() *node.Config {
	return &node.Config{
		// A drain's grace is for clients to move away; tests that drain
		// set their own.
		Node: node.NodeSection{Name: "test-1", Region: "eu-west", DataDir: "/nonexistent", HTTP: "127.0.0.1:0",
			Drain: node.DrainSection{Grace: node.Duration(time.Millisecond)}},
		Regions: []node.RegionSection{
			{Name: "eu-west", Jurisdiction: "eu"},
			{Name: "us-east", Jurisdiction: "us"},
		},
		Tenants: []node.TenantSection{{Name: "t1", KeySHA256: []string{sha(testKey)}}},
		// Tests count what providers receive; probes are tested on their own.
		Probes: node.ProbesSection{Disabled: true},
		// The audit trail is tested on its own, with a directory of its own.
		Audit: node.AuditSection{Disabled: true},
		// A node given a data directory of its own keeps a spend journal
		// there (startNodeBy, startMeshWith); one on /nonexistent none.
		Journal: node.JournalSection{Disabled: true},
	}
}

// startNode starts emulators for ups and a node routing to them. edit,
// if not nil, adjusts the configuration before the node is built.
func startNode(t testing.TB, ups []upstream, edit func(*node.Config)) *fixture {
	t.Helper()
	return startNodeBy(t, ups, edit, harness.StartNode)
}

// startNodeBy is startNode with the node started by start (one that
// does not wait for readiness, say).
func startNodeBy(t testing.TB, ups []upstream, edit func(*node.Config), start func(testing.TB, *node.Config, node.Options) *node.Node) *fixture {
	t.Helper()
	// Emulators count prompts with the process's tokenizer: load it now,
	// so that its first use does not look like a slow provider.
	if err := (route.Tokenizer{}).Err(); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, emus: map[string]*emulator.Emulator{}, cfg: baseConfig()}
	env := maps.Clone(testEnvKeys)
	for _, u := range ups {
		models := u.models
		if len(models) == 0 {
			models = []string{"gpt-4o-mini"}
		}
		ps := node.ProviderSection{
			Name: u.name, Kind: u.kind, Region: "eu-west", Reach: u.reach, Priority: u.priority,
			Jurisdictions: u.juris, Limits: node.RateSection{RPM: u.rpm},
			// Tests count what providers receive: a self-hosted kind's
			// engine metrics are scraped only where a test asks.
			MetricsPath: "off",
		}
		if u.scrape {
			ps.MetricsPath = ""
		}
		if u.region != "" {
			ps.Region = u.region
		}
		ec := u.emu
		if ec.Name == "" {
			ec = emulator.DefaultConfig()
			ec.Name = u.name
			ec.Latency, ec.TTFT, ec.TPS = u.emu.Latency, u.emu.TTFT, u.emu.TPS
			ec.ErrorRate, ec.RPM, ec.DefaultMaxTokens = u.emu.ErrorRate, u.emu.RPM, u.emu.DefaultMaxTokens
		}
		ec.APIKey = u.apiKey
		// The emulator serves what the kind stands for: a vLLM has no
		// Responses API.
		ec.NoResponses = ec.NoResponses || !route.Kind(u.kind).ServesResponses()
		// The emulator charges what the node's configuration says the
		// models cost, so that spend can be checked against it.
		ec.Models, ec.Deployments = map[string]emulator.Price{}, map[string]string{}
		for _, m := range models {
			ec.Models[m] = emulator.Price{InputUSDPerMTok: u.in, OutputUSDPerMTok: u.out}
			if u.kind == "azure" {
				ec.Deployments[m+"-dep"] = m
			}
		}
		for _, m := range u.embeddings {
			ec.Models[m] = emulator.Price{InputUSDPerMTok: u.in}
			if u.kind == "azure" {
				ec.Deployments[m+"-dep"] = m
			}
		}
		if u.apiKey != "" {
			envName := strings.ToUpper(strings.ReplaceAll(u.name, "-", "_")) + "_KEY"
			env[envName] = u.apiKey
			ps.APIKeyEnv = envName
		}
		for _, m := range models {
			ms := node.ModelSection{Name: m, InputUSDPerMTok: u.in, OutputUSDPerMTok: u.out}
			if u.kind == "azure" {
				ms.Deployment = m + "-dep"
				ps.APIVersion = "2024-10-21"
			}
			ps.Models = append(ps.Models, ms)
		}
		for _, m := range u.embeddings {
			ms := node.ModelSection{Name: m, InputUSDPerMTok: u.in, API: "embeddings"}
			if u.kind == "azure" {
				ms.Deployment = m + "-dep"
				ps.APIVersion = "2024-10-21"
			}
			ps.Models = append(ps.Models, ms)
		}
		if u.noEmulator {
			ps.BaseURL = "http://" + closedAddr(t)
		} else {
			e := harness.StartEmulator(t, ec)
			f.emus[u.name] = e
			ps.BaseURL = e.URL()
		}
		f.cfg.Providers = append(f.cfg.Providers, ps)
	}
	if edit != nil {
		edit(f.cfg)
	}
	f.cfg.Journal.Disabled = f.cfg.Node.DataDir == "/nonexistent"
	n := start(t, f.cfg, node.Options{Getenv: func(k string) string { return env[k] }})
	f.node = n
	f.url = "http://" + n.HTTPAddr()
	return f
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	e, _ := emulator.New(emulator.DefaultConfig())
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	addr := e.Addr()
	_ = e.Shutdown(context.Background())
	return addr
}

// post sends a chat completion request with the test key.
func (f *fixture) post(body string, hdr ...string) *http.Response {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const hello = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`

func mustGet(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
