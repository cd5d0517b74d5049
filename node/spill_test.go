package node_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// vllmMetrics is a vLLM's /metrics with waiting requests queued.
func vllmMetrics(running, waiting int) string {
	return "vllm:num_requests_running{model_name=\"m\"} " + strconv.Itoa(running) + "\nvllm:num_requests_waiting{model_name=\"m\"} " + strconv.Itoa(waiting) +
		"\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.4\n"
}

// Capacity and spill-over: an eu tenant with max_ttft 1s is served by the
// cheap local GPUs while their engines' queues are short; with both
// replicas' queues predicting a first token past it, by the dearer eu
// cloud provider (X-LLMesh-Route says why); back on the GPUs when the
// queues drain. The cheapest provider of all, in the us, is never used.
func TestSpillOverToCompliantCloudAndBack(t *testing.T) {
	ec := emulator.DefaultConfig()
	ec.Name, ec.NoResponses = "gpu", true
	ec.Models = map[string]emulator.Price{"gpt-4o-mini": {InputUSDPerMTok: 0.01, OutputUSDPerMTok: 0.01}}
	gpu := harness.StartEmulator(t, ec)
	var fronts []*engineFront
	var replicas []node.ReplicaSection
	for range 2 {
		front, base := startEngineFront(t, gpu.URL())
		front.set(vllmMetrics(2, 0), false)
		fronts = append(fronts, front)
		replicas = append(replicas, node.ReplicaSection{URL: base + "/v1"})
	}
	f := startNode(t, []upstream{
		{name: "cloud", kind: "openai", in: 1, out: 1, juris: []string{"eu"}},
		{name: "us-cloud", kind: "openai", in: 0.001, out: 0.001, juris: []string{"us"}},
	}, func(c *node.Config) {
		c.Tenants[0].Residency, c.Tenants[0].MaxTTFT = "eu", node.Duration(time.Second)
		c.Providers = append(c.Providers, node.ProviderSection{Name: "gpu", Kind: "vllm", Region: "eu-west", Jurisdictions: []string{"eu"},
			Replicas: replicas, Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.01, OutputUSDPerMTok: 0.01}}})
	})
	served := func() (string, string) {
		resp := f.post(hello)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
		}
		return resp.Header.Get("X-LLMesh-Provider"), resp.Header.Get("X-LLMesh-Route")
	}
	phase := func(name string, waiting int, want string) string {
		t.Helper()
		for _, fr := range fronts {
			fr.set(vllmMetrics(2, waiting), false)
		}
		var route string
		wait.For(t, 15*time.Second, name+": served by "+want, func() bool {
			var got string
			got, route = served()
			if got == "us-cloud" {
				t.Fatalf("%s: an eu tenant's request went to the us provider (%s)", name, route)
			}
			return got == want
		})
		return route
	}
	phase("short queues", 0, "gpu")
	// 10 waiting at 250 ms each: about 2.5 s to a first token.
	if r := phase("saturated", 10, "cloud"); !strings.Contains(r, "gpu spilled: predicted TTFT") || !strings.Contains(r, "> max_ttft 1000ms") {
		t.Errorf("X-LLMesh-Route does not say why it spilled: %s", r)
	}
	phase("drained", 0, "gpu")
}

// Cross-region: a us node with no GPUs of its own region's sends an eu
// tenant's requests to the eu GPUs (through an eu node) while what the
// eu node gossips of their engines says they have room, and to the
// compliant eu cloud when it says their queue is long — from gossip
// alone, so its X-LLMesh-Route names the spill; a us tenant's go to the
// us GPUs.
func TestSpillOverAcrossRegions(t *testing.T) {
	ec := emulator.DefaultConfig()
	ec.Name, ec.NoResponses = "gpu", true
	ec.Models = map[string]emulator.Price{"gpt-4o-mini": {InputUSDPerMTok: 0.01, OutputUSDPerMTok: 0.01}}
	gpu := harness.StartEmulator(t, ec)
	euFront, euBase := startEngineFront(t, gpu.URL())
	euFront.set(vllmMetrics(2, 0), false)
	usFront, usBase := startEngineFront(t, gpu.URL())
	usFront.set(vllmMetrics(2, 0), false)
	models := []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.01, OutputUSDPerMTok: 0.01}}
	f := startRegions(t, []upstream{{name: "cloud-eu", kind: "openai", in: 1, out: 1, juris: []string{"eu"}}}, func(_ string, c *node.Config) {
		for i := range c.Tenants {
			if c.Tenants[i].Name == "acme-eu" {
				c.Tenants[i].MaxTTFT = node.Duration(time.Second)
			}
		}
		c.Providers = append(slices.Clone(c.Providers),
			node.ProviderSection{Name: "gpu-eu", Kind: "vllm", Region: "eu-west", Reach: "region", Jurisdictions: []string{"eu"},
				BaseURL: euBase + "/v1", Models: models},
			node.ProviderSection{Name: "gpu-us", Kind: "vllm", Region: "us-east", Reach: "region", Jurisdictions: []string{"us"},
				BaseURL: usBase + "/v1", Models: models})
	})
	us := f.urls["us"]
	phase := func(name string, waiting int, want string) string {
		t.Helper()
		euFront.set(vllmMetrics(2, waiting), false)
		var route string
		wait.For(t, 20*time.Second, name+": served by "+want, func() bool {
			resp := postTo(t, us, hello, "Authorization", "Bearer "+euKey)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
			got := resp.Header.Get("X-LLMesh-Provider")
			if got == "gpu-us" {
				t.Fatalf("%s: an eu tenant's request went to the us GPUs", name)
			}
			route = resp.Header.Get("X-LLMesh-Route")
			return got == want
		})
		return route
	}
	phase("room", 0, "gpu-eu")
	// The us node itself chose the cloud, from gossip: it did not
	// forward to the eu node for that node to spill.
	if r := phase("queued", 10, "cloud-eu"); !strings.HasPrefix(r, "policy=cost; chose cloud-eu") || !strings.Contains(r, "gpu-eu spilled: predicted TTFT") {
		t.Errorf("the us node's X-LLMesh-Route does not name its spill: %s", r)
	}
	phase("drained", 0, "gpu-eu")
	resp := postTo(t, us, hello, "Authorization", "Bearer "+usKey)
	if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Provider") != "gpu-us" {
		t.Fatalf("a us tenant's request: %d from %q", resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"))
	}
}
