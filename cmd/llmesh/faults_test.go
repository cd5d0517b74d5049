package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	f.mu.Lock()
	f.cmd, f.exited = cmd, exited
	f.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(f.http + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("%s exited at start:\n%s", f.name, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30s", f.name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.up.Store(true)
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

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
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
// mixed load: nodes frozen with SIGSTOP, the leader and followers killed
// with SIGKILL and restarted with their data, nodes drained and
// restarted. Throughout: the budget is never overspent, data never goes
// where its residency forbids, no request to a node that stayed healthy
// is refused or fails, the rate-limited provider never sees more than its
// limit in any 60 s window, and at least 90% of the budget is spent before
// the tenant gets 402.
func TestRandomFaultsKeepTheGuarantees(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LLMESH_FAULT_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (LLMESH_FAULT_SEED=%d repeats the faults)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 7))

	// The budget lasts about a minute of the load: what a killed node
	// takes with it is a few seconds of its spending, a few percent.
	const budget, rpm = 0.12, 600
	// Each emulator charges what the nodes' configuration says.
	emu := func(name string, usdPerMTok float64) *emulator.Emulator {
		c := emulator.DefaultConfig()
		c.Name, c.Latency = name, 20*time.Millisecond
		c.Models = map[string]emulator.Price{"m": {InputUSDPerMTok: usdPerMTok, OutputUSDPerMTok: usdPerMTok},
			"n": {InputUSDPerMTok: usdPerMTok, OutputUSDPerMTok: usdPerMTok}}
		e, err := emulator.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var limited, backup, usCheap arrivals
	serve := func(a *arrivals, e *emulator.Emulator, forbidden string) string {
		srv := httptest.NewServer(a.wrap(e.Handler(), forbidden))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	eLimited, eBackup, eUS := emu("limited", 1), emu("backup", 2), emu("us-cheap", 0.1)
	limitedURL, backupURL := serve(&limited, eLimited, ""), serve(&backup, eBackup, "")
	usURL := serve(&usCheap, eUS, "acme")

	keys := map[string]string{"acme": "sk-fault-acme-0123456789", "beta": "sk-fault-beta-0123456789"}
	hash := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	dir := t.TempDir()
	var nodes []*faultNode
	var gossips []string
	type ports struct{ http, rpc, gossip, raft string }
	var ps []ports
	for range 3 {
		p := ports{freePort(t), freePort(t), freePort(t), freePort(t)}
		ps = append(ps, p)
		gossips = append(gossips, fmt.Sprintf("%q", p.gossip))
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
probes: {disabled: true}
audit: {disabled: true}
`, name, filepath.Join(dir, name), p.http, p.rpc, p.gossip, p.raft, strings.Join(gossips, ", "),
			limitedURL, rpm, backupURL, usURL, hash(keys["acme"]), budget, hash(keys["beta"]))
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &faultNode{name: name, cfg: path, http: "http://" + p.http})
	}
	var starting sync.WaitGroup
	for _, n := range nodes {
		starting.Go(func() { n.start(t) })
	}
	starting.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop()
		}
	})

	// Load: acme (eu, budgeted) spends on limited, then backup; beta
	// (anywhere, no budget) on us-cheap. Clients pick a node that is up.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	client := &http.Client{Timeout: 30 * time.Second}
	var (
		healthyFailed, acmeOK, acme402, beta200 atomic.Int64
		failMu                                  sync.Mutex
		failures                                []string
		first402                                atomic.Pointer[float64]
	)
	charged := func() float64 { return eLimited.Stats().ChargedUSD + eBackup.Stats().ChargedUSD }
	var load sync.WaitGroup
	for c := range 8 {
		load.Go(func() {
			cr := rand.New(rand.NewPCG(seed, uint64(100+c)))
			for ctx.Err() == nil {
				time.Sleep(time.Duration(50+cr.IntN(100)) * time.Millisecond)
				n := nodes[cr.IntN(len(nodes))]
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
				req.Header.Set("Authorization", "Bearer "+keys[tenant])
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
					acmeOK.Add(1)
				case code == 200:
					beta200.Add(1)
				case code == 402 && tenant == "acme":
					if acme402.Add(1) == 1 {
						v := charged()
						first402.Store(&v)
					}
				case healthy:
					healthyFailed.Add(1)
					failMu.Lock()
					failures = append(failures, fmt.Sprintf("%s at %s: %d %v %s", tenant, n.name, code, err, msg))
					failMu.Unlock()
				}
			}
		})
	}

	leader := func() int {
		for _, n := range nodes {
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
					return slices.IndexFunc(nodes, func(x *faultNode) bool { return x.name == p.ID })
				}
			}
		}
		return -1
	}
	down := func(n *faultNode) { n.up.Store(false); n.epoch.Add(1) }
	healed := func(n *faultNode) { n.epoch.Add(1) }
	restart := func(n *faultNode) {
		time.Sleep(time.Duration(500+r.IntN(1500)) * time.Millisecond)
		healed(n)
		n.start(t)
	}
	var log []string
	end := time.Now().Add(45 * time.Second)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(2000+r.IntN(2000)) * time.Millisecond)
		// Freeze 30%, kill the leader 20%, a follower 20%, drain 30%.
		switch k := []int{0, 0, 0, 1, 1, 2, 2, 3, 3, 3}[r.IntN(10)]; k {
		case 0: // freeze
			n := nodes[r.IntN(len(nodes))]
			d := time.Duration(1000+r.IntN(2000)) * time.Millisecond
			log = append(log, fmt.Sprintf("freeze %s for %v", n.name, d))
			down(n)
			n.signal(syscall.SIGSTOP)
			time.Sleep(d)
			n.signal(syscall.SIGCONT)
			healed(n)
			n.up.Store(true)
		case 1, 2: // kill the leader, or a follower
			l := leader()
			if l < 0 {
				continue
			}
			i := l
			if k == 2 {
				i = (l + 1 + r.IntN(2)) % 3
			}
			n := nodes[i]
			log = append(log, fmt.Sprintf("kill %s (leader: %v)", n.name, i == l))
			down(n)
			n.signal(syscall.SIGKILL)
			<-n.exited
			restart(n)
		case 3: // drain
			n := nodes[r.IntN(len(nodes))]
			log = append(log, "drain "+n.name)
			down(n)
			resp, err := http.Post(n.http+"/v1/mesh/drain", "application/json", nil)
			if err == nil {
				resp.Body.Close()
			}
			select {
			case <-n.exited:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s did not exit after its drain", n.name)
			}
			restart(n)
		}
	}
	// Load goes on until the budget is spent, or for at most 45 s more.
	for deadline := time.Now().Add(45 * time.Second); acme402.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stop()
	load.Wait()

	spent := charged()
	var books struct {
		Budgets []struct {
			Tenant       string
			OverspendUSD float64 `json:"overspend_usd"`
			SettledUSD   float64 `json:"settled_usd"`
			ForfeitedUSD float64 `json:"forfeited_usd"`
		}
	}
	resp, err := http.Get(nodes[0].http + "/v1/mesh/budgets")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&books)
	resp.Body.Close()
	at402 := 0.0
	if p := first402.Load(); p != nil {
		at402 = *p
	}
	t.Logf("faults: %s", strings.Join(log, "; "))
	t.Logf("acme: %d answered, %d 402; beta: %d answered; charged $%.6f of $%.2f (%.0f%% when acme first got 402); books %+v",
		acmeOK.Load(), acme402.Load(), beta200.Load(), spent, budget, 100*at402/budget, books.Budgets)
	t.Logf("limited: busiest 60 s window %d of %d; acme requests at us-cheap: %d", limited.busiest(), rpm, usCheap.foreign.Load())
	failMu.Lock()
	defer failMu.Unlock()
	if len(failures) > 0 {
		t.Errorf("%d requests to healthy nodes failed; first: %s", len(failures), strings.Join(failures[:min(5, len(failures))], "\n"))
	}
	if spent > budget+1e-9 {
		t.Errorf("the providers charged $%.9f against a budget of $%.2f", spent, budget)
	}
	for _, b := range books.Budgets {
		if b.OverspendUSD != 0 {
			t.Errorf("books report an overspend: %+v", b)
		}
	}
	if n := usCheap.foreign.Load(); n != 0 {
		t.Errorf("%d of acme's requests (residency eu) reached us-cheap", n)
	}
	if w := limited.busiest(); w > rpm {
		t.Errorf("limited saw %d requests within 60 s; its limit is %d", w, rpm)
	}
	if acme402.Load() == 0 {
		t.Errorf("acme's budget was never spent")
	} else if at402 < 0.9*budget {
		t.Errorf("acme got 402 with %.0f%% of its budget spent; at least 90%% must be spendable", 100*at402/budget)
	}
}
