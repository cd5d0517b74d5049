package soak_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
)

// testKey is tenant t1's API key.
const testKey = "sk-test-0123456789abcdef"

const hello = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`

// nodeConfig is a node named name in region (eu-west or us-east) in
// front of providers, with tenant t1 holding testKey.
func nodeConfig(name, region string, providers []node.ProviderSection) *node.Config {
	return &node.Config{
		Node: node.NodeSection{Name: name, Region: region, DataDir: "/nonexistent", HTTP: "127.0.0.1:0",
			Drain: node.DrainSection{Grace: node.Duration(time.Millisecond)}},
		Regions:   []node.RegionSection{{Name: "eu-west", Jurisdiction: "eu"}, {Name: "us-east", Jurisdiction: "us"}},
		Providers: providers,
		Tenants:   []node.TenantSection{{Name: "t1", KeySHA256: []string{harness.KeySHA256(testKey)}}},
		// The tests count what providers receive: no probes; the audit
		// trail is node's to test.
		Probes: node.ProbesSection{Disabled: true},
		Audit:  node.AuditSection{Disabled: true},
		// No data directory, no spend journal; voters get both.
		Journal: node.JournalSection{Disabled: true},
	}
}

// loadTokenizer loads the process's tokenizer, which emulators count
// prompts with, so that its first use does not look like a slow provider.
func loadTokenizer(t *testing.T) {
	t.Helper()
	if err := (route.Tokenizer{}).Err(); err != nil {
		t.Fatal(err)
	}
}

// startProvider starts an emulated provider, p, of OpenAI's kind serving
// gpt-4o-mini at in and out USD per million tokens, and returns it and
// the provider section that names it.
func startProvider(t *testing.T, in, out float64) (*emulator.Emulator, node.ProviderSection) {
	t.Helper()
	loadTokenizer(t)
	ec := emulator.DefaultConfig()
	ec.Name, ec.Models = "p", map[string]emulator.Price{"gpt-4o-mini": {InputUSDPerMTok: in, OutputUSDPerMTok: out}}
	e := harness.StartEmulator(t, ec)
	return e, node.ProviderSection{Name: "p", Kind: "openai", Region: "eu-west", BaseURL: e.URL(), MetricsPath: "off",
		Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: in, OutputUSDPerMTok: out}}}
}

// mesh is three nodes in one process, each a voter of the ledger.
type mesh struct {
	nodes []*node.Node
	urls  []string
}

// startVoters starts three gossiping nodes, node-0 and node-2 in
// eu-west and node-1 in us-east, each a voter of the Raft ledger (timed
// for one machine, its state in a temporary directory), in front of
// providers. edit, if not nil, adjusts each node's configuration.
func startVoters(t *testing.T, providers []node.ProviderSection, edit func(c *node.Config)) *mesh {
	t.Helper()
	loadTokenizer(t)
	var cfgs []*node.Config
	for i := range 3 {
		c := nodeConfig(fmt.Sprintf("node-%d", i), []string{"eu-west", "us-east"}[i%2], providers)
		c.Node.Gossip, c.Node.Raft, c.Node.RPC = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		c.Node.Voter, c.Node.BootstrapExpect, c.Node.DataDir = true, 3, t.TempDir()
		c.Journal.Disabled = false
		if edit != nil {
			edit(c)
		}
		cfgs = append(cfgs, c)
	}
	m := &mesh{nodes: harness.StartMesh(t, cfgs, func(int) node.Options {
		return node.Options{Logger: slog.New(slog.DiscardHandler), Version: "test", Getenv: func(string) string { return "" },
			LedgerTuning: func(c *consensus.ServerConfig) { c.Timings = consensus.FastTimings }}
	})}
	for _, nd := range m.nodes {
		m.urls = append(m.urls, "http://"+nd.HTTPAddr())
	}
	return m
}

// leader is the index of the node the others follow, or -1 while no
// node answers with one. A node that does not answer is passed over.
func (m *mesh) leader() int {
	for _, u := range m.urls {
		var doc struct{ Peers []consensus.Peer }
		resp, err := http.Get(u + "/v1/mesh/raft/peers")
		if err != nil {
			continue
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			continue
		}
		for _, p := range doc.Peers {
			if p.Leader {
				return slices.IndexFunc(m.nodes, func(n *node.Node) bool { return n.Name() == p.ID })
			}
		}
	}
	return -1
}

// post sends hello with testKey to the node at url and returns the
// answer's status, its body read and discarded.
func post(t *testing.T, url string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(hello))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metrics is the node at url's /metrics, line by line; none when the
// node does not answer.
func metrics(url string) []string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return strings.Split(string(b), "\n")
}

// metric is the sample of series (its name and labels, as /metrics
// writes them) at the node at url, as written; "" when the node does
// not answer or has no such sample.
func metric(url, series string) string {
	for _, line := range metrics(url) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// recorder is an emulated provider, serving any model at no cost, that
// records when each request reached it, by the body's user field (the
// tests' stand-in for the key it came with: the node passes the body on
// as it is; "" for requests without one).
type recorder struct {
	url  string
	mu   sync.Mutex
	seen map[string][]time.Time
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	em, err := emulator.New(emulator.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{seen: map[string][]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var doc struct{ User string }
		_ = json.Unmarshal(body, &doc)
		rec.mu.Lock()
		rec.seen[doc.User] = append(rec.seen[doc.User], time.Now())
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		em.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rec.url = srv.URL
	return rec
}

// arrivals returns when user's requests arrived, oldest first.
func (r *recorder) arrivals(user string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen[user])
}

// every calls f rate times a second, each call in a goroutine of wg's,
// until ctx ends; wg.Wait waits for the last call to return.
func every(ctx context.Context, wg *sync.WaitGroup, rate float64, f func()) {
	wg.Go(func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Go(f)
		}
	})
}

// busiestMinute is the most of times within any 60 s.
func busiestMinute(times []time.Time) int {
	worst := 0
	for i := range times {
		j, _ := slices.BinarySearchFunc(times, times[i].Add(time.Minute), func(a, b time.Time) int { return a.Compare(b) })
		worst = max(worst, j-i)
	}
	return worst
}
