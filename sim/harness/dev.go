// Package harness composes emulated providers and llmesh nodes: the
// built-in stack of `llmesh agent -dev`, and the fixtures tests start
// nodes with. It imports node/ and sim/emulator; node/ never imports it.
package harness

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
)

// Dev is the built-in stack of `llmesh agent -dev`: emulated providers in
// two jurisdictions, one node configured to use them, and a generated
// tenant key.
type Dev struct {
	// Config is the node's configuration; callers may adjust it (the HTTP
	// address, say) before starting the node.
	Config *node.Config
	// Key is the dev tenant's API key.
	Key string
	// Emulators are the providers, by name.
	Emulators map[string]*emulator.Emulator
	dataDir   string
}

// devProvider is one emulated provider of the dev stack.
type devProvider struct {
	section node.ProviderSection
	models  map[string]emulator.Price
}

// devProviders are the dev stack's providers: the same gpt-4o models from
// OpenAI in the US and Azure OpenAI in the EU, and an open model from a
// self-hosted GPU cluster that only the EU region can reach, cheaper than
// a hosted API serving it globally.
func devProviders() []devProvider {
	gpt := []node.ModelSection{
		{Name: "gpt-4o-mini", InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60},
		{Name: "gpt-4o", InputUSDPerMTok: 2.50, OutputUSDPerMTok: 10},
	}
	azure := []node.ModelSection{
		{Name: "gpt-4o-mini", Deployment: "gpt-4o-mini", InputUSDPerMTok: 0.15, OutputUSDPerMTok: 0.60},
		{Name: "gpt-4o", Deployment: "gpt-4o", InputUSDPerMTok: 2.50, OutputUSDPerMTok: 10},
	}
	return []devProvider{
		{section: node.ProviderSection{Name: "openai-us", Kind: "openai", Region: "us-east", Reach: "global",
			Jurisdictions: []string{"us"}, Models: gpt, Priority: 0}},
		{section: node.ProviderSection{Name: "azure-eu", Kind: "azure", Region: "eu-west", Reach: "global",
			Jurisdictions: []string{"eu"}, APIVersion: "2024-10-21", Models: azure, Priority: 1}},
		{section: node.ProviderSection{Name: "gpu-eu", Kind: "openai", Region: "eu-west", Reach: "region",
			Jurisdictions: []string{"eu"}, Models: []node.ModelSection{
				{Name: "llama-3-8b", Upstream: "meta-llama/Meta-Llama-3-8B-Instruct", InputUSDPerMTok: 0.05, OutputUSDPerMTok: 0.10},
			}}},
		{section: node.ProviderSection{Name: "together-us", Kind: "openai", Region: "us-east", Reach: "global",
			Jurisdictions: []string{"us"}, Models: []node.ModelSection{
				{Name: "llama-3-8b", Upstream: "meta-llama/Meta-Llama-3-8B-Instruct", InputUSDPerMTok: 0.10, OutputUSDPerMTok: 0.20},
			}}},
	}
}

// StartDev starts the dev stack's emulators on loopback and returns the
// node configuration that uses them, listening on httpAddr.
func StartDev(httpAddr string) (*Dev, error) {
	d := &Dev{Emulators: map[string]*emulator.Emulator{}}
	ok := false
	defer func() {
		if !ok {
			_ = d.Shutdown(context.Background())
		}
	}()
	key, err := NewKey("sk-llmesh-dev-")
	if err != nil {
		return nil, err
	}
	d.Key = key
	if d.dataDir, err = os.MkdirTemp("", "llmesh-dev-*"); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(key))
	cfg := &node.Config{
		Node: node.NodeSection{Name: "dev", Region: "eu-west", DataDir: d.dataDir, HTTP: httpAddr, Gossip: "127.0.0.1:0",
			Voter: true, Raft: "127.0.0.1:0", RPC: "127.0.0.1:0", BootstrapExpect: 1,
			// One node, no peers to hand requests to: stop soon.
			Drain: node.DrainSection{Grace: node.Duration(500 * time.Millisecond)}},
		Regions: []node.RegionSection{
			{Name: "eu-west", Jurisdiction: "eu"},
			{Name: "us-east", Jurisdiction: "us"},
		},
		Tenants: []node.TenantSection{{Name: "dev", KeySHA256: []string{hex.EncodeToString(sum[:])},
			Budget: &node.BudgetSection{USD: 5, Period: "day"}}},
	}
	for _, p := range devProviders() {
		ec := emulator.DefaultConfig()
		ec.Name = p.section.Name
		ec.Latency = 2 * time.Millisecond
		ec.TTFT = 80 * time.Millisecond
		ec.TPS = 120
		ec.Models = map[string]emulator.Price{}
		for _, m := range p.section.Models {
			name := m.Name
			if m.Upstream != "" {
				name = m.Upstream
			}
			ec.Models[name] = emulator.Price{InputUSDPerMTok: m.InputUSDPerMTok, OutputUSDPerMTok: m.OutputUSDPerMTok}
			if m.Deployment != "" {
				ec.Models[m.Deployment] = ec.Models[name]
			}
		}
		e, err := emulator.New(ec)
		if err != nil {
			return nil, fmt.Errorf("emulator %s: %w", p.section.Name, err)
		}
		if err := e.Start("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("emulator %s: %w", p.section.Name, err)
		}
		d.Emulators[p.section.Name] = e
		p.section.BaseURL = e.URL()
		cfg.Providers = append(cfg.Providers, p.section)
	}
	d.Config = cfg
	ok = true
	return d, nil
}

// DevLedger keeps a dev node's Raft ledger in memory, with elections
// timed for one machine.
func DevLedger(c *consensus.ServerConfig) {
	c.InMemory = true
	c.Timings = consensus.FastTimings
}

// Shutdown stops the emulators and removes the node's data directory.
func (d *Dev) Shutdown(ctx context.Context) error {
	var errs []error
	for _, e := range d.Emulators {
		errs = append(errs, e.Shutdown(ctx))
	}
	if d.dataDir != "" {
		errs = append(errs, os.RemoveAll(d.dataDir))
	}
	return errors.Join(errs...)
}

// NewKey returns a new API key: prefix followed by 128 random bits in hex.
func NewKey(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return prefix + hex.EncodeToString(b[:]), nil
}
