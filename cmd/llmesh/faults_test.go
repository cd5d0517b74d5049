package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
	"github.com/llmesh/llmesh/sim/lincheck"
)

// faultNode is one agent process of the fault test, restartable on the
// same addresses and data directory.
type faultNode struct {
	name, cfg, http string
	mu              sync.Mutex
	cmd             *exec.Cmd
	exited          chan struct{}
	// up is false while the node is frozen, killed, draining or
	// restarting; epoch counts its faults, so that a request can tell
	// whether its node stayed healthy while it ran.
	up    atomic.Bool
	epoch atomic.Int64
}

func (f *faultNode) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(binary, "agent", "-config", f.cfg)
	logs := &syncLog{}
	cmd.Stdout, cmd.Stderr = io.Discard, logs
	if d := os.Getenv("LLMESH_FAULT_LOGS"); d != "" {
		// Every life of the node's log, for reading a failure after.
		lf, err := os.OpenFile(filepath.Join(d, f.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lf.Close() })
		fmt.Fprintf(lf, "=== start %s\n", time.Now().Format(time.RFC3339Nano))
		cmd.Stderr = io.MultiWriter(logs, quietWriter{lf})
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	f.mu.Lock()
	f.cmd, f.exited = cmd, exited
	f.mu.Unlock()
	wait.Every(50*time.Millisecond).For(t, 30*time.Second, f.name+" to be ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("%s exited at start:\n%s", f.name, logs.String())
		default:
		}
		resp, err := http.Get(f.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	f.up.Store(true)
}

// quietWriter writes what it can and never fails: a log file closed
// before the node's last line must not stop the copy of its stderr.
type quietWriter struct{ w io.Writer }

func (q quietWriter) Write(p []byte) (int, error) {
	_, _ = q.w.Write(p)
	return len(p), nil
}

func (f *faultNode) signal(s syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.cmd.Process.Signal(s)
}

func (f *faultNode) stop() {
	f.signal(syscall.SIGCONT)
	f.signal(syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(15 * time.Second):
		f.signal(syscall.SIGKILL)
		<-f.exited
	}
}

// arrivals records when requests reach a provider, and what they say.
type arrivals struct {
	mu    sync.Mutex
	times []time.Time
	// foreign counts requests whose user field names a tenant that may
	// not send data there.
	foreign atomic.Int64
}

func (a *arrivals) wrap(h http.Handler, forbidden string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if forbidden != "" && bytes.Contains(body, []byte(`"user":"`+forbidden)) {
			a.foreign.Add(1)
		}
		a.mu.Lock()
		a.times = append(a.times, time.Now())
		a.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// busiest is the most requests within any 60 s.
func (a *arrivals) busiest() int {
	a.mu.Lock()
	ts := slices.Clone(a.times)
	a.mu.Unlock()
	worst := 0
	for i := range ts {
		j, _ := slices.BinarySearchFunc(ts, ts[i].Add(time.Minute), func(x, y time.Time) int { return x.Compare(y) })
		worst = max(worst, j-i)
	}
	return worst
}

// A randomised fault run of three real agent processes (voters) under
// mixed load from 12 clients: for 90 s and at least nine faults, nodes
// frozen with SIGSTOP, the leader and followers killed with SIGKILL and
// restarted with their data, nodes drained and restarted. Throughout: the
// budget is never overspent, data never goes where its residency
// forbids, no request to a node that stayed healthy is refused or fails,
// and the rate-limited provider never sees more than its limit in any
// 60 s window. Since every node killed comes back with its spend
// journal, nothing is written off: at least 97% of the budget is spent
// before the tenant gets 402, and within 10 s of each restart the
// provider's capacity is at least 90% the live nodes' (no ghost share
// holds it).
func TestRandomFaultsKeepTheGuarantees(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LLMESH_FAULT_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (LLMESH_FAULT_SEED=%d repeats the faults; LLMESH_FAULT_LOGS=DIR keeps the nodes' logs)", seed, seed)
	f := &faultRun{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, 7)),
		keys: map[string]string{"acme": "sk-fault-acme-0123456789", "beta": "sk-fault-beta-0123456789"}}
	f.startProviders()
	f.startNodes()

	// Load: acme (eu, budgeted) spends on limited, then backup; beta
	// (anywhere, no budget) on us-cheap. Clients pick a node that is up.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var load sync.WaitGroup
	for c := range 12 {
		load.Go(func() { f.load(ctx, c) })
	}
	// Operators' writes and reads of the ledger, recorded for the
	// linearizability check.
	f.lin = lincheck.NewHistory()
	f.linStart()
	for c := range 2 {
		load.Go(func() { f.linClient(ctx, c) })
	}
	var log []string
	start := time.Now()
	for faults := 0; time.Since(start) < 90*time.Second || faults < 9 && time.Since(start) < 150*time.Second; faults++ {
		time.Sleep(time.Duration(4000+f.r.IntN(2000)) * time.Millisecond) // the load runs fault-free this long
		at := time.Now().Format("15:04:05.000")
		for _, what := range f.fault() {
			log = append(log, at+" "+what)
		}
	}
	f.faults = len(log)
	// Load goes on until the budget is spent, or for at most 90 s more,
	// and a second after.
	wait.Every(100*time.Millisecond).Within(90*time.Second, func() bool { return f.acme402.Load() != 0 })
	time.Sleep(time.Second) // the load's last second: the time is the test's
	stop()
	load.Wait()
	t.Logf("faults: %s", strings.Join(log, "; "))
	f.check()
}

// The budget lasts about two minutes of the load: past the faults, so
// that the budget is spent with every node up.
const faultBudget, faultRPM = 0.30, 600

// faultRun is TestRandomFaultsKeepTheGuarantees' providers, nodes and
// what its load saw.
type faultRun struct {
	t                        *testing.T
	seed                     uint64
	r                        *rand.Rand
	keys                     map[string]string
	eLimited, eBackup        *emulator.Emulator
	limited, backup, usCheap arrivals
	limitedURL, backupURL    string
	usURL                    string
	nodes                    []*faultNode
	healthyFailed, acmeOK    atomic.Int64
	acme402, beta200         atomic.Int64
	failMu                   sync.Mutex
	failures                 []string
	first402                 atomic.Pointer[float64]
	kills                    int // nodes killed, each restarted with its data
	faults                   int
	lin                      *lincheck.History
	linSeq                   atomic.Int64
	// capacity is, for each restart, how long after it the provider's
	// capacity held by no ghost share was back to 90%.
	capacity []time.Duration
}

// startProviders starts the emulated providers behind recorders of what
// reaches them; each charges what the nodes' configuration says.
func (f *faultRun) startProviders() {
	emu := func(name string, usdPerMTok float64) *emulator.Emulator {
		c := emulator.DefaultConfig()
		c.Name, c.Latency = name, 20*time.Millisecond
		c.Models = map[string]emulator.Price{"m": {InputUSDPerMTok: usdPerMTok, OutputUSDPerMTok: usdPerMTok},
			"n": {InputUSDPerMTok: usdPerMTok, OutputUSDPerMTok: usdPerMTok}}
		e, err := emulator.New(c)
		if err != nil {
			f.t.Fatal(err)
		}
		return e
	}
	serve := func(a *arrivals, e *emulator.Emulator, forbidden string) string {
		srv := httptest.NewServer(a.wrap(e.Handler(), forbidden))
		f.t.Cleanup(srv.Close)
		return srv.URL
	}
	var eUS *emulator.Emulator
	f.eLimited, f.eBackup, eUS = emu("limited", 1), emu("backup", 2), emu("us-cheap", 0.1)
	f.limitedURL, f.backupURL = serve(&f.limited, f.eLimited, ""), serve(&f.backup, f.eBackup, "")
	f.usURL = serve(&f.usCheap, eUS, "acme")
}

// startNodes writes the three voters' configurations and starts them.
func (f *faultRun) startNodes() {
	t := f.t
	dir := t.TempDir()
	var gossips []string
	type ports struct{ http, rpc, gossip, raft string }
	var ps []ports
	free := harness.FreePorts(t, 12)
	for i := range 3 {
		addr := func(j int) string { return fmt.Sprintf("127.0.0.1:%d", free[4*i+j]) }
		ps = append(ps, ports{addr(0), addr(1), addr(2), addr(3)})
		gossips = append(gossips, fmt.Sprintf("%q", addr(2)))
	}
	for i, p := range ps {
		name := fmt.Sprintf("f%d", i)
		cfg := fmt.Sprintf(`node:
  name: %s
  region: eu-west
  data_dir: %s
  http: %s
  rpc: %s
  gossip: %s
  raft: %s
  voter: true
  bootstrap_expect: 3
  join: [%s]
  drain: {grace: 200ms, timeout: 10s}
regions: [{name: eu-west, jurisdiction: eu}, {name: us-east, jurisdiction: us}]
providers:
  - {name: limited, region: eu-west, reach: global, base_url: %q, limits: {rpm: %d},
     models: [{name: m, input_usd_per_mtok: 1, output_usd_per_mtok: 1}]}
  - {name: backup, region: eu-west, reach: global, base_url: %q,
     models: [{name: m, input_usd_per_mtok: 2, output_usd_per_mtok: 2}]}
  - {name: us-cheap, region: us-east, reach: global, base_url: %q,
     models: [{name: m, input_usd_per_mtok: 0.1, output_usd_per_mtok: 0.1}, {name: n, input_usd_per_mtok: 0.1, output_usd_per_mtok: 0.1}]}
tenants:
  - {name: acme, key_sha256: [%s], residency: eu, budget: {usd: %g, period: total}}
  - {name: beta, key_sha256: [%s]}
  - {name: lin, key_sha256: [%s]}
probes: {disabled: true}
audit: {disabled: true}
`, name, filepath.Join(dir, name), p.http, p.rpc, p.gossip, p.raft, strings.Join(gossips, ", "),
			f.limitedURL, faultRPM, f.backupURL, f.usURL, harness.KeySHA256(f.keys["acme"]), faultBudget, harness.KeySHA256(f.keys["beta"]),
			harness.KeySHA256(linKey))
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		f.nodes = append(f.nodes, &faultNode{name: name, cfg: path, http: "http://" + p.http})
	}
	var starting sync.WaitGroup
	for _, n := range f.nodes {
		starting.Go(func() { n.start(t) })
	}
	starting.Wait()
	t.Cleanup(func() {
		for _, n := range f.nodes {
			n.stop()
		}
	})
}

func (f *faultRun) charged() float64 {
	return f.eLimited.Stats().ChargedUSD + f.eBackup.Stats().ChargedUSD
}

// load is client c's traffic until ctx ends: a request every 50-150 ms
// to a node that is up, acme's or (one client in four) beta's.
func (f *faultRun) load(ctx context.Context, c int) {
	client := &http.Client{Timeout: 30 * time.Second}
	cr := rand.New(rand.NewPCG(f.seed, uint64(100+c)))
	for ctx.Err() == nil {
		time.Sleep(time.Duration(50+cr.IntN(100)) * time.Millisecond) // pacing: a client's think time
		n := f.nodes[cr.IntN(len(f.nodes))]
		if !n.up.Load() {
			continue
		}
		tenant, model := "acme", "m"
		if c%4 == 3 {
			tenant, model = "beta", "n"
		}
		body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"user":"%s-%d","messages":[{"role":"user","content":"faults"}]}`,
			model, 4+cr.IntN(12), tenant, c)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.http+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.keys[tenant])
		epoch := n.epoch.Load()
		resp, err := client.Do(req)
		code := 0
		var msg []byte
		if err == nil {
			msg, _ = io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			code = resp.StatusCode
		}
		healthy := n.epoch.Load() == epoch && n.up.Load() && ctx.Err() == nil
		switch {
		case code == 200 && tenant == "acme":
			f.acmeOK.Add(1)
		case code == 200:
			f.beta200.Add(1)
		case code == 402 && tenant == "acme":
			if f.acme402.Add(1) == 1 {
				f.t.Logf("first 402 at %s", time.Now().Format("15:04:05.000"))
				v := f.charged()
				f.first402.Store(&v)
			}
		case healthy:
			f.healthyFailed.Add(1)
			f.failMu.Lock()
			f.failures = append(f.failures, fmt.Sprintf("%s %s at %s: %d %v %s", time.Now().Format("15:04:05.000"), tenant, n.name, code, err, msg))
			f.failMu.Unlock()
		}
	}
}

// leader is the index of the node an up node reports as the Raft leader,
// or -1.
func (f *faultRun) leader() int {
	for _, n := range f.nodes {
		if !n.up.Load() {
			continue
		}
		resp, err := http.Get(n.http + "/v1/mesh/raft/peers")
		if err != nil {
			continue
		}
		var doc struct {
			Peers []struct {
				ID     string
				Leader bool
			}
		}
		_ = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		for _, p := range doc.Peers {
			if p.Leader {
				return slices.IndexFunc(f.nodes, func(x *faultNode) bool { return x.name == p.ID })
			}
		}
	}
	return -1
}

func down(n *faultNode)   { n.up.Store(false); n.epoch.Add(1) }
func healed(n *faultNode) { n.epoch.Add(1) }

func (f *faultRun) restart(n *faultNode) {
	time.Sleep(time.Duration(500+f.r.IntN(1500)) * time.Millisecond) // the node stays down this long
	healed(n)
	n.start(f.t)
	f.capacityBack(time.Now())
}

// capacityBack records how long after a restart at from the limited
// provider's capacity held by no ghost share (an earlier boot's grants,
// which nobody can use until they lapse) is at least 90% (15 s when it
// is not by then).
func (f *faultRun) capacityBack(from time.Time) {
	took := 15 * time.Second
	wait.Every(100*time.Millisecond).Within(took, func() bool {
		for _, n := range f.nodes {
			if !n.up.Load() {
				continue
			}
			resp, err := http.Get(n.http + "/v1/mesh/shares?consistency=stale")
			if err != nil {
				continue
			}
			var doc struct {
				Shares []struct {
					Provider     string
					Ghost        bool
					CommittedRPM float64 `json:"committed_rpm"`
				}
			}
			err = json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
			if err != nil {
				continue
			}
			free := float64(faultRPM)
			for _, s := range doc.Shares {
				if s.Provider == "limited" && s.Ghost {
					free -= s.CommittedRPM
				}
			}
			if free >= 0.9*faultRPM {
				took = time.Since(from)
				return true
			}
			return false
		}
		return false
	})
	f.capacity = append(f.capacity, took)
}

// fault injects one fault and heals it, and says what it did: freeze
// 30%, kill the leader 20%, a follower 20%, drain 30%.
func (f *faultRun) fault() []string {
	r := f.r
	switch k := []int{0, 0, 0, 1, 1, 2, 2, 3, 3, 3}[r.IntN(10)]; k {
	case 0: // freeze
		n := f.nodes[r.IntN(len(f.nodes))]
		d := time.Duration(1000+r.IntN(2000)) * time.Millisecond
		down(n)
		n.signal(syscall.SIGSTOP)
		time.Sleep(d) // the freeze lasts this long
		n.signal(syscall.SIGCONT)
		healed(n)
		n.up.Store(true)
		return []string{fmt.Sprintf("freeze %s for %v", n.name, d)}
	case 1, 2: // kill the leader, or a follower
		l := f.leader()
		if l < 0 {
			return nil
		}
		i := l
		if k == 2 {
			i = (l + 1 + r.IntN(2)) % 3
		}
		n := f.nodes[i]
		down(n)
		n.signal(syscall.SIGKILL)
		<-n.exited
		f.restart(n)
		f.kills++
		return []string{fmt.Sprintf("kill %s (leader: %v)", n.name, i == l)}
	default: // drain
		n := f.nodes[r.IntN(len(f.nodes))]
		down(n)
		resp, err := http.Post(n.http+"/v1/mesh/drain", "application/json", nil)
		if err == nil {
			resp.Body.Close()
		}
		select {
		case <-n.exited:
		case <-time.After(20 * time.Second):
			f.t.Fatalf("%s did not exit after its drain", n.name)
		}
		f.restart(n)
		return []string{"drain " + n.name}
	}
}

// check asserts the guarantees once the load has stopped.
func (f *faultRun) check() {
	t := f.t
	spent := f.charged()
	var books struct {
		Budgets []struct {
			Tenant       string
			OverspendUSD float64 `json:"overspend_usd"`
			SettledUSD   float64 `json:"settled_usd"`
			ForfeitedUSD float64 `json:"forfeited_usd"`
		}
	}
	resp, err := http.Get(f.nodes[0].http + "/v1/mesh/budgets")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&books)
	resp.Body.Close()
	at402 := 0.0
	if p := f.first402.Load(); p != nil {
		at402 = *p
	}
	t.Logf("acme: %d answered, %d 402; beta: %d answered; charged $%.6f of $%.2f (%.1f%% when acme first got 402); %d kills; books %+v",
		f.acmeOK.Load(), f.acme402.Load(), f.beta200.Load(), spent, faultBudget, 100*at402/faultBudget, f.kills, books.Budgets)
	t.Logf("limited: busiest 60 s window %d of %d; acme requests at us-cheap: %d", f.limited.busiest(), faultRPM, f.usCheap.foreign.Load())
	f.failMu.Lock()
	defer f.failMu.Unlock()
	if len(f.failures) > 0 {
		t.Errorf("%d requests to healthy nodes failed:\n%s", len(f.failures), strings.Join(f.failures[:min(20, len(f.failures))], "\n"))
	}
	if spent > faultBudget+1e-9 {
		t.Errorf("the providers charged $%.9f against a budget of $%.2f", spent, faultBudget)
	}
	for _, b := range books.Budgets {
		if b.OverspendUSD != 0 {
			t.Errorf("books report an overspend: %+v", b)
		}
	}
	if n := f.usCheap.foreign.Load(); n != 0 {
		t.Errorf("%d of acme's requests (residency eu) reached us-cheap", n)
	}
	if w := f.limited.busiest(); w > faultRPM {
		t.Errorf("limited saw %d requests within 60 s; its limit is %d", w, faultRPM)
	}
	// Every node killed came back with its spend journal: its escrow went
	// back to the ledger, settled at what it may have spent (a few
	// requests' bounds more than it did), and nothing was written off.
	forfeited := 0.0
	for _, b := range books.Budgets {
		if b.Tenant == "acme" {
			forfeited = b.ForfeitedUSD
		}
	}
	if forfeited != 0 {
		t.Errorf("$%.6f of acme's escrow was written off after %d kills, each restarted with its journal", forfeited, f.kills)
	}
	if err := f.lin.Check(time.Minute, t.ArtifactDir()); err != nil {
		t.Errorf("operators' writes and reads of the ledger through the faults: %v", err)
	} else {
		t.Logf("%d admin writes and linearizable reads (budgets, limits, keys' settings, acme's settled spend) are linearizable", f.lin.Len())
	}
	if f.faults < 9 {
		t.Errorf("only %d faults in the run; it needs at least nine", f.faults)
	}
	if f.acme402.Load() == 0 {
		t.Errorf("acme's budget was never spent")
	} else if at402 < 0.97*faultBudget {
		t.Errorf("acme got 402 with %.1f%% of its budget spent; at least 97%% must be spendable", 100*at402/faultBudget)
	}
	t.Logf("the provider's capacity back to 90%% after each of %d restarts within %v", len(f.capacity), f.capacity)
	for i, d := range f.capacity {
		if d > 10*time.Second {
			t.Errorf("restart %d: the provider's capacity held by no ghost share was back to 90%% only after %v; within 10 s is the bound", i+1, d)
		}
	}
}
