package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
	"github.com/llmesh/llmesh/sim/loadtest"
)

const (
	opsPrice  = 10.0 / 1e6
	opsBudget = 0.01
	opsRPS    = 50
)

var opsTenants = []loadtest.Tenant{
	{Name: "acme", Key: "sk-acme-ops-test-key-0001"},     // eu residency
	{Name: "globex", Key: "sk-globex-ops-test-key-0002"}, // us residency
	{Name: "open", Key: "sk-open-ops-test-key-0003"},     // anywhere
	{Name: "capped", Key: "sk-capped-ops-test-key-0004", Budgeted: true},
}

// opsNode is one agent of the operations mesh: its configuration (ports
// and data directory kept across restarts) and its process.
type opsNode struct {
	name, region string
	http         string
	ports        []int // http, rpc, gossip, raft
	dataDir      string
	cmd          *exec.Cmd
	exited       chan error
	log          *syncLog
}

type opsMesh struct {
	t     *testing.T
	nodes map[string]*opsNode
	seeds []string
	emus  string // the providers' section
	lb    *loadtest.Balancer
}

// cloud-us has a mesh-wide rate limit, so that rate shares are leased
// from the leader: a drained leader hands over what it granted, and a
// node restarted meanwhile gets its share at once.
//
// startOpsMesh starts the emulated providers and three voters: eu-1
// (eu-west, which alone reaches the eu GPU cluster), us-1 (us-east) and
// ap-1 (ap-south, no provider of its own).
func startOpsMesh(t *testing.T) *opsMesh {
	if testing.Short() {
		t.Skip("starts real agent processes under load: not with -short")
	}
	emu := func(name string) string {
		cfg := emulator.DefaultConfig()
		cfg.Name, cfg.TPS, cfg.Latency = name, 20, 5*time.Millisecond
		return harness.StartEmulator(t, cfg).URL()
	}
	m := &opsMesh{t: t, nodes: map[string]*opsNode{}, lb: loadtest.NewBalancer()}
	t.Cleanup(m.lb.Close)
	price := fmt.Sprintf("{name: chat, input_usd_per_mtok: %g, output_usd_per_mtok: %g}", opsPrice*1e6, opsPrice*1e6)
	m.emus = fmt.Sprintf(`providers:
  - {name: gpu-eu, region: eu-west, reach: region, base_url: %q, models: [%s]}
  - {name: cloud-eu, region: eu-west, base_url: %q, priority: 1, models: [%s]}
  - {name: cloud-us, region: us-east, base_url: %q, limits: {rpm: 60000}, models: [%s]}
tenants:
  - {name: acme, key_sha256: [%s], residency: eu}
  - {name: globex, key_sha256: [%s], residency: us}
  - {name: open, key_sha256: [%s]}
  - {name: capped, key_sha256: [%s], budget: {usd: %g, period: total}}
`, emu("gpu-eu"), price, emu("cloud-eu"), price, emu("cloud-us"), price,
		harness.KeySHA256(opsTenants[0].Key), harness.KeySHA256(opsTenants[1].Key), harness.KeySHA256(opsTenants[2].Key), harness.KeySHA256(opsTenants[3].Key), opsBudget)
	for _, n := range [][2]string{{"eu-1", "eu-west"}, {"us-1", "us-east"}, {"ap-1", "ap-south"}} {
		m.define(n[0], n[1])
	}
	for _, name := range []string{"eu-1", "us-1", "ap-1"} {
		m.start(name)
	}
	m.awaitVoters(3, 30*time.Second)
	if !m.lb.AwaitReady(3, 30*time.Second) {
		t.Fatal("the three nodes are not ready")
	}
	return m
}

// define reserves a node's ports and data directory, kept across its
// restarts.
func (m *opsMesh) define(name, region string) *opsNode {
	p := harness.FreePorts(m.t, 4)
	n := &opsNode{name: name, region: region, http: fmt.Sprintf("http://127.0.0.1:%d", p[0]), ports: p, dataDir: m.t.TempDir()}
	m.seeds = append(m.seeds, fmt.Sprintf("127.0.0.1:%d", p[2]))
	m.nodes[name] = n
	return n
}

// config is a node's configuration file: every node defined so far is a
// gossip seed, as an operator lists them.
func (m *opsMesh) config(n *opsNode) string {
	p := n.ports
	return fmt.Sprintf(`node:
  name: %s
  region: %s
  data_dir: %s
  http: 127.0.0.1:%d
  rpc: 127.0.0.1:%d
  gossip: 127.0.0.1:%d
  raft: 127.0.0.1:%d
  voter: true
  bootstrap_expect: 3
  join: [%s]
  drain: {grace: 2s, timeout: 30s}
regions: [{name: eu-west, jurisdiction: eu}, {name: us-east, jurisdiction: us}, {name: ap-south, jurisdiction: ap}]
probes: {disabled: true}
%s`, n.name, n.region, n.dataDir, p[0], p[1], p[2], p[3], strings.Join(m.seeds, ", "), m.emus)
}

// start runs a defined node's agent and adds it to the balancer.
func (m *opsMesh) start(name string) {
	t := m.t
	n := m.nodes[name]
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(m.config(n)), 0o600); err != nil {
		t.Fatal(err)
	}
	level := cmp.Or(os.Getenv("LLMESH_TEST_LOG_LEVEL"), "warn")
	cmd := exec.Command(binary, "agent", "-config", path, "-log-level", level)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd, n.exited, n.log = cmd, make(chan error, 1), &syncLog{}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			n.log.add(sc.Text())
		}
		n.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	m.lb.Set(name, n.http)
}

// awaitVoters waits until some node reports a leader and count voters.
func (m *opsMesh) awaitVoters(count int, within time.Duration) {
	m.t.Helper()
	wait.Every(100*time.Millisecond).For(m.t, within, fmt.Sprintf("a Raft configuration of %d voters with a leader", count), func() bool {
		_, peers := m.raft()
		return peers == count
	})
}

// raft returns the leader and the number of voters, as the first node
// that answers sees them.
func (m *opsMesh) raft() (string, int) {
	for _, n := range m.nodes {
		if n.cmd == nil || n.cmd.ProcessState != nil {
			continue
		}
		var doc struct {
			Peers []struct {
				ID            string
				Voter, Leader bool
			}
		}
		if getStatus(n.http+"/v1/mesh/raft/peers", &doc) != nil {
			continue
		}
		leader, voters := "", 0
		for _, p := range doc.Peers {
			if p.Voter {
				voters++
			}
			if p.Leader {
				leader = p.ID
			}
		}
		if leader != "" {
			return leader, voters
		}
	}
	return "", 0
}

func getStatus(url string, v any) error {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitExit waits for a node's process to end and returns its exit code.
func (m *opsMesh) waitExit(name string, within time.Duration) int {
	m.t.Helper()
	n := m.nodes[name]
	select {
	case <-n.exited:
		return n.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		m.t.Fatalf("%s did not exit within %s; its log:\n%s", name, within, n.log.String())
	}
	return -1
}

// awaitReady waits until the node answers /readyz 200.
func (m *opsMesh) awaitReady(name string, within time.Duration) {
	m.t.Helper()
	if awaitReady(m.nodes[name].http, within) == nil {
		return
	}
	var logs strings.Builder
	for other, n := range m.nodes {
		out, _ := exec.Command(binary, "members", "-addr", n.http).CombinedOutput()
		fmt.Fprintf(&logs, "--- %s:\n%s\n%s", other, out, n.log.String())
	}
	m.t.Fatalf("%s not ready within %s; the logs:\n%s", name, within, logs.String())
}

// checkBudget asserts the capped tenant's budget was never overspent:
// by the ledger's books (no overspend, settled within the limit) and by
// what the clients were billed for, at the configured prices.
func (m *opsMesh) checkBudget(rep *loadtest.Report) {
	m.t.Helper()
	committed := -1.0 // settled + reserved, by the books
	for _, n := range m.nodes {
		if n.cmd.ProcessState != nil {
			continue
		}
		var doc struct {
			Budgets []struct {
				Tenant       string
				LimitUSD     float64 `json:"limit_usd"`
				SettledUSD   float64 `json:"settled_usd"`
				ReservedUSD  float64 `json:"reserved_usd"`
				OverspendUSD float64 `json:"overspend_usd"`
			}
		}
		if err := getStatus(n.http+"/v1/mesh/budgets", &doc); err != nil {
			continue
		}
		for _, b := range doc.Budgets {
			if b.Tenant != "capped" {
				continue
			}
			m.t.Logf("capped: limit $%.4f, settled $%.4f, reserved $%.4f, overspend $%.4f; clients billed $%.4f",
				b.LimitUSD, b.SettledUSD, b.ReservedUSD, b.OverspendUSD, rep.SpendUSD["capped"])
			if b.OverspendUSD != 0 || b.SettledUSD > b.LimitUSD+1e-9 {
				m.t.Fatalf("the budget was overspent: %+v", b)
			}
			committed = b.SettledUSD + b.ReservedUSD
		}
		break
	}
	if rep.SpendUSD["capped"] > opsBudget+1e-9 {
		m.t.Fatalf("the capped tenant was served $%.6f, beyond its budget of $%g", rep.SpendUSD["capped"], opsBudget)
	}
	// The budget must have been pressed for the check to mean anything:
	// all of it settled or held as escrow, and requests refused for it.
	// (Whether they get 402 or 503 admission_timeout depends on where the
	// escrow left sits: a killed node's stays reserved until it comes back
	// or its lease is written off.)
	if committed < 0.9*opsBudget || rep.Budget402+rep.BudgetWait == 0 {
		m.t.Fatalf("the capped tenant's budget was not pressed (committed $%.4f of $%g): the test did not test it (%s)", committed, opsBudget, rep)
	}
}

// loadFor starts the load and returns a function that stops it and
// returns the report.
func (m *opsMesh) loadFor() func() *loadtest.Report {
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan *loadtest.Report, 1)
	go func() {
		out <- loadtest.Run(ctx, m.lb, opsTenants, loadtest.Config{Model: "chat", RPS: opsRPS, PricePerToken: opsPrice})
	}()
	return func() *loadtest.Report {
		cancel()
		return <-out
	}
}

func (m *opsMesh) requireClean(rep *loadtest.Report) {
	m.t.Helper()
	m.t.Logf("load: %s; connections refused and sent to another node: %d", rep, m.lb.Refused())
	if len(rep.Failures) > 0 || len(rep.Truncated) > 0 {
		f, tr := rep.FirstFailures()
		m.t.Fatalf("failed (first ten): %q\ntruncated (first ten): %q", f, tr)
	}
}

// syncLog is a process's log, written by the reader of its stderr and
// read by the test.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
