package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/sim/emulator"
)

// Demo is `llmesh demo`: a three-region mesh in one process on loopback.
// Nodes eu-1 (eu-west), us-1 (us-east) and ap-1 (ap-south) gossip, hold
// the Raft ledger together and forward to each other; emulated providers
// stand in each region.
type Demo struct {
	Nodes   []*node.Node
	Tenants []DemoTenant
	// AuditDir holds each node's audit trail (AuditDir/NODE), removed at
	// Shutdown.
	AuditDir string
	emus     []*emulator.Emulator
}

// DemoTenant is one of the demo's tenants and its key.
type DemoTenant struct {
	Name, Key, Residency, Budget string
}

// demoNodes are the demo's nodes and their regions, in start order.
func demoNodes() [][2]string {
	return [][2]string{{"eu-1", "eu-west"}, {"us-1", "us-east"}, {"ap-1", "ap-south"}}
}

// StartDemo starts the demo's emulators and nodes, the first node's HTTP
// API on firstHTTP and the others on the next ports (port 0: any), and
// returns once every node is ready. Each node runs config.DemoConfig,
// completed with the emulators' addresses, the tenants' keys, the first
// node as the others' seed and an audit directory of its own.
func StartDemo(ctx context.Context, firstHTTP string, logger *slog.Logger) (*Demo, error) {
	host, port, err := net.SplitHostPort(firstHTTP)
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	first, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("-http: port %q: %w", port, err)
	}
	d := &Demo{}
	if d.AuditDir, err = os.MkdirTemp("", "llmesh-demo-audit-*"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			d.Shutdown(context.Background())
		}
	}()
	urls, err := d.startEmulators()
	if err != nil {
		return nil, err
	}
	hashes, err := d.makeTenants()
	if err != nil {
		return nil, err
	}
	var seed string
	for i, n := range demoNodes() {
		cfg := config.DemoConfig(n[0], n[1])
		cfg.Node.HTTP = net.JoinHostPort(host, "0")
		if first != 0 {
			cfg.Node.HTTP = net.JoinHostPort(host, strconv.Itoa(first+i))
		}
		cfg.Audit.Dir = filepath.Join(d.AuditDir, n[0])
		for j := range cfg.Providers {
			p := &cfg.Providers[j]
			if p.BaseURL = urls[p.Name][0]; len(urls[p.Name]) > 1 {
				p.Replicas = config.ReplicaURLs(urls[p.Name]...)
			}
		}
		for j := range cfg.Tenants {
			cfg.Tenants[j].KeySHA256 = []string{hashes[cfg.Tenants[j].Name]}
		}
		if seed != "" {
			cfg.Node.Join = []string{seed}
		}
		nd, err := node.New(cfg, node.Options{Logger: logger, LedgerTuning: DevLedger, Version: "demo"})
		if err != nil {
			return nil, err
		}
		if err := nd.Start(ctx); err != nil {
			return nil, err
		}
		d.Nodes = append(d.Nodes, nd)
		if seed == "" {
			seed = nd.Mesh().Addr()
		}
	}
	if err := d.awaitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	ok = true
	return d, nil
}

// startEmulators starts the demo's emulated providers and returns each
// provider's addresses: three replicas of the EU GPU cluster, one of each
// other.
func (d *Demo) startEmulators() (map[string][]string, error) {
	llama := map[string]emulator.Price{"meta-llama/Meta-Llama-3-8B-Instruct": {InputUSDPerMTok: 0.05, OutputUSDPerMTok: 0.10}}
	mini := map[string]emulator.Price{"gpt-4o-mini": {InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60}}
	urls := map[string][]string{}
	for _, p := range []struct {
		name     string
		replicas int
		tps      float64
		models   map[string]emulator.Price
	}{
		{"gpu-eu", 3, 200, llama}, {"azure-eu", 1, 150, mini}, {"azure-us", 1, 150, mini}, {"openai-us", 1, 150, mergePrices(mini, llama)},
	} {
		for i := range p.replicas {
			name := p.name
			if p.replicas > 1 {
				name = fmt.Sprintf("%s-%d", p.name, i)
			}
			c := emulator.DefaultConfig()
			c.Latency, c.TTFT, c.TPS, c.Models = 3*time.Millisecond, 60*time.Millisecond, p.tps, p.models
			c.NoResponses = p.name == "gpu-eu" // a vLLM cluster's
			e, err := startEmulator(name, c)
			if err != nil {
				return nil, err
			}
			d.emus = append(d.emus, e)
			urls[p.name] = append(urls[p.name], e.URL())
		}
	}
	return urls, nil
}

// makeTenants makes the demo tenants' keys and returns each one's hash.
func (d *Demo) makeTenants() (map[string]string, error) {
	hashes := map[string]string{}
	for _, t := range []DemoTenant{
		{Name: "acme", Residency: "eu", Budget: "$5/day"},
		{Name: "globex", Residency: "us", Budget: "$5/day"},
		{Name: "initech", Budget: "$0.0001 in all"},
	} {
		key, err := NewKey("sk-demo-" + t.Name + "-")
		if err != nil {
			return nil, err
		}
		t.Key = key
		d.Tenants = append(d.Tenants, t)
		sum := sha256.Sum256([]byte(key))
		hashes[t.Name] = hex.EncodeToString(sum[:])
	}
	return hashes, nil
}

// awaitReady waits until every node is ready, for at most limit.
func (d *Demo) awaitReady(ctx context.Context, limit time.Duration) error {
	for deadline := time.Now().Add(limit); ; {
		ready := 0
		for _, nd := range d.Nodes {
			if nd.Ready() {
				ready++
			}
		}
		if ready == len(d.Nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the demo mesh did not become ready within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func mergePrices(ms ...map[string]emulator.Price) map[string]emulator.Price {
	out := map[string]emulator.Price{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// DemoCall is one request of the demo's traffic and what became of it.
type DemoCall struct {
	Tenant, Entry, Model, Session, Residency string
	Status                                   int
	Retries                                  int // 429s retried before the answer
	Code, Provider, Replica, Via, Route      string
}

// Traffic sends the demo's requests: each tenant at each node, a few
// turns of two sessions on the GPU cluster, and initech (narrowing its
// residency by header) until its budget runs out.
func (d *Demo) Traffic(ctx context.Context) []DemoCall {
	tenant := func(name string) DemoTenant {
		for _, t := range d.Tenants {
			if t.Name == name {
				return t
			}
		}
		return DemoTenant{}
	}
	var calls []DemoCall
	send := func(tn string, entry int, model, session, residency string) {
		t := tenant(tn)
		nd := d.Nodes[entry]
		body := fmt.Sprintf(`{"model":%q,"max_tokens":12,"messages":[{"role":"user","content":"Hello from %s"}]}`, model, tn)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.HTTPAddr()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+t.Key)
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.Header.Set("X-LLMesh-Session", session)
		}
		if residency != "" {
			req.Header.Set("X-LLMesh-Residency", residency)
		}
		c := DemoCall{Tenant: tn, Entry: nd.Name(), Model: model, Session: session, Residency: t.Residency}
		if residency != "" {
			c.Residency = residency + " (header)"
		}
		// As the OpenAI SDKs do, a 429 is retried after its Retry-After
		// (here for up to fifteen seconds).
		var resp *http.Response
		var err error
		for deadline := time.Now().Add(15 * time.Second); ; c.Retries++ {
			r := req.Clone(ctx)
			r.Body = io.NopCloser(strings.NewReader(body))
			resp, err = http.DefaultClient.Do(r)
			if err != nil || resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
				break
			}
			resp.Body.Close()
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
			}
		}
		if err != nil {
			c.Code = err.Error()
			calls = append(calls, c)
			return
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		c.Status = resp.StatusCode
		c.Provider, c.Replica, c.Via = resp.Header.Get("X-LLMesh-Provider"), resp.Header.Get("X-LLMesh-Replica"), resp.Header.Get("X-LLMesh-Via")
		c.Route = resp.Header.Get("X-LLMesh-Route")
		if resp.StatusCode != http.StatusOK {
			if i := strings.Index(string(b), `"code":"`); i >= 0 {
				c.Code = strings.SplitN(string(b[i+8:]), `"`, 2)[0]
			}
		}
		calls = append(calls, c)
	}
	for entry := range d.Nodes {
		send("acme", entry, "llama-3-8b", "", "")
		send("acme", entry, "gpt-4o-mini", "", "")
		send("globex", entry, "gpt-4o-mini", "", "")
		send("globex", entry, "llama-3-8b", "", "")
	}
	for turn := range 3 {
		send("acme", turn%3, "llama-3-8b", "chat-alice", "")
		send("acme", turn%3, "llama-3-8b", "chat-bob", "")
	}
	for i := range 14 {
		send("initech", 1, "gpt-4o-mini", "", []string{"us", "eu"}[i%2])
	}
	return calls
}

// Shutdown drains the nodes one after another, the last started first,
// then stops the emulators. One at a time, each leaves a Raft
// configuration that still has a quorum to remove it at once; all
// together, the last voters wait out their leave's bound.
func (d *Demo) Shutdown(ctx context.Context) {
	for i := len(d.Nodes) - 1; i >= 0; i-- {
		_ = d.Nodes[i].Shutdown(ctx)
	}
	for _, e := range d.emus {
		_ = e.Shutdown(ctx)
	}
	if d.AuditDir != "" {
		_ = os.RemoveAll(d.AuditDir)
	}
}
