package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/loadtest"
)

// The operations tests run real agent processes on loopback: three voters
// in three regions under steady load from the official openai client
// through a load balancer (see balancer), and drain, add, kill and
// restart nodes while the load runs.

// opsPrice is every provider's price per token, in and out: a budget of
// opsBudget lasts a few seconds of the capped tenant's share of the load.
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

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
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
		return startEmulator(t, cfg).URL()
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
		sha(opsTenants[0].Key), sha(opsTenants[1].Key), sha(opsTenants[2].Key), sha(opsTenants[3].Key), opsBudget)
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
	p := freePorts(m.t, 4)
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
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, peers := m.raft(); peers == count {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.t.Fatalf("no Raft configuration of %d voters with a leader within %s", count, within)
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
	// (Whether they get 402 or 429 depends on where the escrow left sits:
	// a killed node's stays reserved until its lease is written off.)
	if committed < 0.9*opsBudget || rep.Budget402+rep.Budget429 == 0 {
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

// Draining one node under load: zero failed requests, zero truncated
// streams, and the node exits 0. Then a node added live takes traffic
// within seconds, and joins Raft as a voter.
func TestDrainAndJoinUnderLoad(t *testing.T) {
	m := startOpsMesh(t)
	stop := m.loadFor()
	time.Sleep(3 * time.Second) // load runs: the time is the test's, not a wait for a condition
	out, err := exec.Command(binary, "drain", "-wait", "-addr", m.nodes["eu-1"].http).CombinedOutput()
	if err != nil {
		t.Fatalf("llmesh drain -wait: %v\n%s", err, out)
	}
	t.Logf("llmesh drain -wait:\n%s", out)
	if code := m.waitExit("eu-1", 40*time.Second); code != 0 {
		t.Fatalf("the drained node exited %d; its log:\n%s", code, m.nodes["eu-1"].log.String())
	}
	m.lb.Remove("eu-1")
	m.awaitVoters(2, 15*time.Second)

	m.define("eu-2", "eu-west")
	added := time.Now()
	m.start("eu-2")
	m.awaitReady("eu-2", 30*time.Second)
	m.awaitVoters(3, 20*time.Second)
	time.Sleep(2 * time.Second)
	rep := stop()
	m.requireClean(rep)
	first, ok := rep.FirstAt["eu-2"]
	if !ok {
		t.Fatalf("the node added live took no traffic: %s", rep)
	}
	t.Logf("the node added live answered its first request %s after it was started", first.Sub(added).Round(time.Millisecond))
	m.checkBudget(rep)
}

// kill -9 of the Raft leader under load: the failed requests are at most
// those in flight on it, the others elect a leader, and the budget is
// never overspent.
func TestLeaderKilledUnderLoad(t *testing.T) {
	m := startOpsMesh(t)
	stop := m.loadFor()
	time.Sleep(3 * time.Second)
	leader, _ := m.raft()
	if leader == "" {
		t.Fatal("no leader")
	}
	killed := time.Now()
	if err := m.nodes[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.waitExit(leader, 10*time.Second)
	// In flight on it when it died: sent before its death was seen, not
	// answered before the signal was sent.
	inflight := m.lb.InFlightDuring(leader, killed, time.Now())
	var elected time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if l, _ := m.raft(); l != "" && l != leader {
			elected = time.Since(killed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader within 30s")
		}
	}
	time.Sleep(5 * time.Second)
	rep := stop()
	t.Logf("killed leader %s with %d requests in flight on it; a new leader %s later", leader, inflight, elected.Round(time.Millisecond))
	t.Logf("load: %s; connections refused and sent to another node: %d", rep, m.lb.Refused())
	if len(rep.Failures) > inflight {
		f, _ := rep.FirstFailures()
		t.Fatalf("%d requests failed, more than the %d in flight on the killed node (first ten): %q", len(rep.Failures), inflight, f)
	}
	for _, f := range rep.Failures {
		if !strings.Contains(f, `node "`+leader+`"`) && !strings.Contains(f, `node ""`) {
			t.Errorf("a request failed that the killed node was not serving: %s", f)
		}
	}
	if elected > 15*time.Second {
		t.Fatalf("a new leader took %s", elected)
	}
	m.checkBudget(rep)
}

// A rolling restart of all three nodes, one by one, under load (SIGTERM,
// which drains; start again with the same data; wait until it is ready
// and a voter again): zero failed requests.
func TestRollingRestartUnderLoad(t *testing.T) {
	m := startOpsMesh(t)
	stop := m.loadFor()
	time.Sleep(2 * time.Second)
	for _, name := range []string{"eu-1", "us-1", "ap-1"} {
		began := time.Now()
		if err := m.nodes[name].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := m.waitExit(name, 40*time.Second); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM; its log:\n%s", name, code, m.nodes[name].log.String())
		}
		m.start(name)
		m.awaitReady(name, 30*time.Second)
		m.awaitVoters(3, 30*time.Second)
		t.Logf("%s restarted: ready and a voter again %s after SIGTERM", name, time.Since(began).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	rep := stop()
	m.requireClean(rep)
	for _, name := range []string{"eu-1", "us-1", "ap-1"} {
		if rep.ByNode[name] == 0 {
			t.Fatalf("%s answered nothing: %s", name, rep)
		}
	}
	m.checkBudget(rep)
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

// TestDemo runs `llmesh demo` as the README does: three regions, a table
// of where the requests went in which residency always holds, a working
// `llmesh status` against a node, and a clean exit on Ctrl-C.
func TestDemo(t *testing.T) {
	cmd, out, stderr := started(t, "demo", "-http", "127.0.0.1:0")
	var lines []string
	done := make(chan error, 1)
	go func() {
		for {
			line, err := out.ReadString('\n')
			lines = append(lines, strings.TrimRight(line, "\n"))
			if strings.Contains(line, "keeps serving") || err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo output ended (%v):\n%s\n%s", err, strings.Join(lines, "\n"), stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not finish its traffic within 60s")
	}
	text := strings.Join(lines, "\n")
	t.Log(text)
	var usAPI string
	forwarded := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "us-1" {
			usAPI = f[3]
		}
		if len(f) < 9 || (f[0] != "acme" && f[0] != "globex") {
			continue
		}
		// TENANT RESIDENCY ENTERED MODEL SESSION ANSWER PROVIDER REPLICA CALLED-BY
		tenant, entry, answer, provider, via := f[0], f[2], f[5], f[6], f[8]
		if answer != "200" {
			t.Errorf("%s at %s answered %s", tenant, entry, answer)
		}
		if tenant == "acme" && !strings.HasSuffix(provider, "-eu") || tenant == "globex" && !strings.HasSuffix(provider, "-us") {
			t.Errorf("residency broken: %s served by %s: %s", tenant, provider, l)
		}
		if tenant == "acme" && provider == "gpu-eu" && entry != "eu-1" && via == "eu-1" {
			forwarded = true
		}
	}
	if !forwarded {
		t.Error("no acme request entering outside eu-west was forwarded to eu-1 for gpu-eu")
	}
	if !strings.Contains(text, "budget_exceeded") {
		t.Error("initech's budget never ran out")
	}
	// No request of a tenant with budget left is refused: none was
	// retried after a 429, and initech's answers are 200s until its
	// budget is spent, then 402s.
	if strings.Contains(text, "×429") {
		t.Error("a request was refused with 429 and retried")
	}
	spent := false
	for _, l := range lines {
		if f := strings.Fields(l); len(f) < 6 || f[0] != "initech" || !strings.Contains(l, "gpt-4o-mini") {
			continue
		}
		switch ok := strings.Contains(l, " 200 "); {
		case strings.Contains(l, " 402 budget_exceeded"):
			spent = true
		case spent || !ok:
			t.Errorf("initech answered other than 200 before its budget ran out, or than 402 after: %s", l)
		}
	}
	if usAPI == "" {
		t.Fatal("no address for us-1")
	}
	if out := runCLI(t, "status", "-addr", usAPI); !strings.Contains(out, "us-1 (us-east, us)") || !strings.Contains(out, "3 alive") {
		t.Fatalf("status:\n%s", out)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exited with %v\n%s", err, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not exit within 30s of SIGINT")
	}
}

// SIGHUP reloads providers from the file: a provider added to it takes
// traffic without a restart; a file that would change the node section
// is refused (logged with the field) and the agent keeps serving.
func TestSIGHUPReloads(t *testing.T) {
	e1, e2 := startEmulator(t, emulator.DefaultConfig()), startEmulator(t, emulator.DefaultConfig())
	key := "sk-reload-test-key-0001"
	dir := t.TempDir()
	write := func(region string, providers string) string {
		path := filepath.Join(dir, "node.yaml")
		cfg := fmt.Sprintf(`node: {name: r1, region: %s, data_dir: %s, http: "127.0.0.1:0"}
regions: [{name: eu-west, jurisdiction: eu}, {name: us-east, jurisdiction: us}]
probes: {disabled: true}
tenants: [{name: t, key_sha256: [%s]}]
providers:
%s`, region, dir, sha(key), providers)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := fmt.Sprintf("  - {name: first, region: eu-west, base_url: %q, models: [{name: m, input_usd_per_mtok: 5}]}\n", e1.URL())
	two := one + fmt.Sprintf("  - {name: second, region: eu-west, base_url: %q, models: [{name: m, input_usd_per_mtok: 1}]}\n", e2.URL())
	path := write("eu-west", one)
	cmd := exec.Command(binary, "agent", "-config", path)
	stderr := &syncLog{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var base string
	for deadline := time.Now().Add(20 * time.Second); base == ""; time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`msg="node started".* http=(\S+)`).FindStringSubmatch(stderr.String()); m != nil {
			base = "http://" + m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not start:\n%s", stderr)
		}
	}
	provider := func() string {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Llmesh-Provider")
	}
	if p := provider(); p != "first" {
		t.Fatalf("before the reload: %q", p)
	}
	write("eu-west", two)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); provider() != "second"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cheaper provider added by SIGHUP took no traffic:\n%s", stderr)
		}
	}
	write("us-east", two)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "node.region changed: restart the node"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a changed region was not refused by name:\n%s", stderr)
		}
	}
	if p := provider(); p != "second" {
		t.Fatalf("after a refused reload: %q", p)
	}
}

// startEmulator runs an emulated provider until the test ends.
func startEmulator(t *testing.T, cfg emulator.Config) *emulator.Emulator {
	t.Helper()
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}
