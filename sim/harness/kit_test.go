package harness_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestMain fails the run if a goroutine the tests started outlives them:
// everything the kit starts must stop when its test ends.
func TestMain(m *testing.M) {
	os.Exit(wait.NoLeaks(m))
}

const kitKey = "sk-kit-0123456789abcdef"

// kitConfig is a node in front of the emulated provider at url.
func kitConfig(name, url string) *node.Config {
	return &node.Config{
		Node: node.NodeSection{Name: name, Region: "eu-west", DataDir: "/nonexistent", HTTP: "127.0.0.1:0", Gossip: "127.0.0.1:0",
			Drain: node.DrainSection{Grace: node.Duration(time.Millisecond)}},
		Regions: []node.RegionSection{{Name: "eu-west", Jurisdiction: "eu"}},
		Tenants: []node.TenantSection{{Name: "t1", KeySHA256: []string{harness.KeySHA256(kitKey)}}},
		Providers: []node.ProviderSection{{Name: "emu", Kind: "openai", Region: "eu-west", BaseURL: url,
			Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60}}}},
		Probes:  node.ProbesSection{Disabled: true},
		Audit:   node.AuditSection{Disabled: true},
		Journal: node.JournalSection{Disabled: true},
	}
}

// A mesh started by the kit is joined and ready when StartMesh returns,
// and each node answers through the emulator the kit started.
func TestStartMesh(t *testing.T) {
	e := harness.StartEmulator(t, emulator.DefaultConfig())
	var cfgs []*node.Config
	for i := range 3 {
		cfgs = append(cfgs, kitConfig(fmt.Sprintf("kit-%d", i), e.URL()))
	}
	nodes := harness.StartMesh(t, cfgs, nil)
	for _, n := range nodes {
		if got := len(n.Mesh().Members()); got != 3 || !n.Ready() {
			t.Fatalf("%s: %d members, ready %v", n.Name(), got, n.Ready())
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+n.HTTPAddr()+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+kitKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s answered %s", n.Name(), resp.Status)
		}
	}
	if got := e.Stats().Requests; got != 3 {
		t.Fatalf("the emulator served %d requests, want 3", got)
	}
}

// The dev node is ready when StartDevNode returns and knows the dev key.
func TestStartDevNode(t *testing.T) {
	dev, n := harness.StartDevNode(t)
	if !n.Ready() {
		t.Fatal("the dev node is not ready")
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.HTTPAddr()+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+dev.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the dev node answered %s", resp.Status)
	}
}

// FreePorts gives distinct ports; KeySHA256 is the key's SHA-256 in hex.
func TestFreePortsAndKeySHA256(t *testing.T) {
	ports := harness.FreePorts(t, 4)
	seen := map[int]bool{}
	for _, p := range ports {
		if p == 0 || seen[p] {
			t.Fatalf("ports %v", ports)
		}
		seen[p] = true
	}
	if got, want := harness.KeySHA256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("KeySHA256(abc) = %s, want %s", got, want)
	}
}
