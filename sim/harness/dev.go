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
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/route"
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

// StartDev starts the dev stack's emulators on loopback and returns
// config.DevConfig completed to use them, listening on httpAddr: a fresh
// data directory, each provider's base_url and a new dev tenant key.
func StartDev(httpAddr string) (*Dev, error) {
	key, err := NewKey(devKeyPrefix)
	if err != nil {
		return nil, err
	}
	return StartDevKey(httpAddr, key)
}

// StartDevKey is StartDev with the dev tenant's key given (see DevKey).
func StartDevKey(httpAddr, key string) (*Dev, error) {
	d := &Dev{Emulators: map[string]*emulator.Emulator{}, Key: key}
	ok := false
	defer func() {
		if !ok {
			_ = d.Shutdown(context.Background())
		}
	}()
	var err error
	if d.dataDir, err = os.MkdirTemp("", "llmesh-dev-*"); err != nil {
		return nil, err
	}
	cfg := config.DevConfig()
	cfg.Node.HTTP, cfg.Node.DataDir = httpAddr, d.dataDir
	sum := sha256.Sum256([]byte(key))
	cfg.Tenants[0].KeySHA256 = []string{hex.EncodeToString(sum[:])}
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		ec := devEmulator(p.Models)
		ec.NoResponses = !route.Kind(p.Kind).ServesResponses() // what the kind stands for
		e, err := startEmulator(p.Name, ec)
		if err != nil {
			return nil, err
		}
		d.Emulators[p.Name] = e
		p.BaseURL = e.URL()
	}
	d.Config = cfg
	ok = true
	return d, nil
}

// devEmulator is the emulator standing for a dev provider serving models:
// it answers to each model's upstream name (and deployment) at its price.
func devEmulator(models []config.ModelSection) emulator.Config {
	ec := emulator.DefaultConfig()
	ec.Latency, ec.TTFT, ec.TPS = 2*time.Millisecond, 80*time.Millisecond, 120
	ec.Models = map[string]emulator.Price{}
	for _, m := range models {
		name := m.Name
		if m.Upstream != "" {
			name = m.Upstream
		}
		ec.Models[name] = emulator.Price{InputUSDPerMTok: m.InputUSDPerMTok, OutputUSDPerMTok: m.OutputUSDPerMTok}
		if m.Deployment != "" {
			ec.Models[m.Deployment] = ec.Models[name]
		}
	}
	return ec
}

// startEmulator starts an emulator named name on a loopback port.
func startEmulator(name string, ec emulator.Config) (*emulator.Emulator, error) {
	ec.Name = name
	e, err := emulator.New(ec)
	if err != nil {
		return nil, fmt.Errorf("emulator %s: %w", name, err)
	}
	if err := e.Start("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("emulator %s: %w", name, err)
	}
	return e, nil
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
