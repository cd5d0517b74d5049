package node_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// engineFront is a self-hosted replica as a node sees it: the emulator
// serves its API, and /metrics answers what the test sets (or hangs).
type engineFront struct {
	mu      sync.Mutex
	metrics string
	hang    bool
	release chan struct{}
}

func (e *engineFront) set(metrics string, hang bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.metrics, e.hang = metrics, hang
}

func startEngineFront(t *testing.T, api string) (*engineFront, string) {
	t.Helper()
	target, _ := url.Parse(api)
	proxy := httputil.NewSingleHostReverseProxy(target)
	e := &engineFront{release: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			proxy.ServeHTTP(w, r)
			return
		}
		e.mu.Lock()
		text, hang := e.metrics, e.hang
		e.mu.Unlock()
		if hang {
			select {
			case <-e.release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = w.Write([]byte(text))
	}))
	t.Cleanup(func() { close(e.release); srv.Close() })
	return e, srv.URL
}

// A node scrapes each replica of a vllm provider at /metrics (its base
// URL's /v1 taken off) and shows the figures; a replica whose metrics are
// garbage or hang is marked stale, and requests are served all along
// without waiting for a scrape.
func TestEngineMetricsAreScraped(t *testing.T) {
	f := startNode(t, []upstream{{name: "emu", kind: "openai"}}, nil)
	front, base := startEngineFront(t, f.emus["emu"].URL())
	front.set("vllm:num_requests_running{model_name=\"m\"} 7\nvllm:num_requests_waiting{model_name=\"m\"} 3\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n", false)
	g := startNode(t, nil, func(c *node.Config) {
		c.Providers = []node.ProviderSection{{Name: "gpu", Kind: "vllm", Region: "eu-west", BaseURL: base + "/v1",
			Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.1, OutputUSDPerMTok: 0.1}}}}
	})
	metric := func(line string) bool { return strings.Contains(readAll(t, mustGet(t, g.url+"/metrics").Body), line) }
	wait.For(t, 10*time.Second, "the replica's engine figures on /metrics", func() bool {
		return metric(`llmesh_engine_requests_running{provider="gpu",replica="0"} 7`) &&
			metric(`llmesh_engine_requests_waiting{provider="gpu",replica="0"} 3`) &&
			metric(`llmesh_engine_kv_cache_usage_ratio{provider="gpu",replica="0"} 0.5`) &&
			metric(`llmesh_engine_signals_stale{provider="gpu",replica="0"} 0`)
	})
	for _, c := range []struct {
		name string
		text string
		hang bool
	}{{"garbage", "<html>gateway error</html>", false}, {"a hang", "", true}} {
		front.set(c.text, c.hang)
		wait.For(t, 10*time.Second, c.name+" to mark the replica stale", func() bool {
			return metric(`llmesh_engine_signals_stale{provider="gpu",replica="0"} 1`)
		})
		start := time.Now()
		if resp := g.post(hello); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", c.name, resp.StatusCode)
		}
		t.Logf("%s: a request took %v while the replica's metrics were unreadable", c.name, time.Since(start))
		front.set("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n", false)
		wait.For(t, 10*time.Second, "the replica fresh again", func() bool {
			return metric(`llmesh_engine_signals_stale{provider="gpu",replica="0"} 0`)
		})
	}
}

// A node's load report tells the mesh the room of the self-hosted
// providers it scrapes: the us node sees the eu GPU cluster's queue from
// gossip alone.
func TestEngineRoomIsGossiped(t *testing.T) {
	f := startNode(t, []upstream{{name: "emu", kind: "openai"}}, nil)
	front, base := startEngineFront(t, f.emus["emu"].URL())
	front.set("vllm:num_requests_running 12\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.9\n", false)
	m := startMesh(t, 2, nil, func(i int, c *node.Config) {
		c.Providers = []node.ProviderSection{{Name: "gpu-eu", Kind: "vllm", Region: "eu-west", Reach: "region", BaseURL: base,
			Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.1, OutputUSDPerMTok: 0.1}}}}
	})
	us := m.nodes[1] // node-1 is in us-east: it scrapes nothing of eu-west's
	wait.For(t, 15*time.Second, "node-0's report of gpu-eu at node-1", func() bool {
		for name, l := range us.Mesh().Loads() {
			for _, g := range l.Engines {
				if name == "node-0" && g.Provider == "gpu-eu" && g.Replicas == 1 && g.Running == 12 && g.Waiting == 5 && g.KVUsage == 0.9 {
					return true
				}
			}
		}
		return false
	})
	for name, l := range us.Mesh().Loads() {
		if name == "node-1" && len(l.Engines) != 0 {
			t.Fatalf("node-1 scraped a provider of another region: %+v", l.Engines)
		}
	}
}
