package node_test

import (
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// voters makes every node of a mesh a voter, bootstrapping once all n are
// seen, with Raft's state in a temporary directory.
func voters(t *testing.T, n int, more func(i int, c *node.Config)) func(i int, c *node.Config) {
	return func(i int, c *node.Config) {
		c.Node.Voter, c.Node.BootstrapExpect = true, n
		c.Node.Raft, c.Node.RPC = "127.0.0.1:0", "127.0.0.1:0"
		c.Node.DataDir = t.TempDir()
		if more != nil {
			more(i, c)
		}
	}
}

// fastRaft is Raft timed for one machine.
func fastRaft(i int, o *node.Options) {
	o.LedgerTuning = func(c *consensus.ServerConfig) { c.Timings = consensus.FastTimings }
}

func budgetsOf(t *testing.T, url string) []views.BudgetInfo {
	t.Helper()
	var doc struct{ Budgets []views.BudgetInfo }
	if code := getJSON(t, url+"/v1/mesh/budgets", "", &doc); code != 200 {
		t.Fatalf("budgets: %d", code)
	}
	return doc.Budgets
}

// Three voters, one tenant with a $1 budget, concurrent traffic through
// all three: the provider charges at most $1, every node then answers
// 402, and the ledger settled exactly what the provider charged.
func TestBudgetHoldsAcrossThreeNodes(t *testing.T) {
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", in: 1, out: 100}}, voters(t, 3, func(i int, c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: 1, Period: "total"}
	}), fastRaft)
	e := m.emus["p"]
	// ~$0.01 a request: 100 completion tokens at $100 per million.
	body := `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"spend"}]}`
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 3 {
		for range 4 {
			wg.Go(func() {
				for streak := 0; streak < 5; {
					resp := postTo(t, m.urls[i], body)
					switch resp.StatusCode {
					case 200:
						ok.Add(1)
						streak = 0
					case 402:
						refused.Add(1)
						streak++
					case 503: // escrow not gathered in time (admission_timeout): retry
						time.Sleep(10 * time.Millisecond) // a client's back-off before its retry
					default:
						t.Errorf("node %d: %d", i, resp.StatusCode)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	charged := e.Stats().ChargedUSD
	if charged > 1+1e-9 {
		t.Fatalf("the provider charged $%.9f against a $1 budget", charged)
	}
	for i, u := range m.urls {
		if resp := postTo(t, u, body); resp.StatusCode != 402 {
			t.Fatalf("node %d answered %d once the budget was spent", i, resp.StatusCode)
		}
	}
	var b views.BudgetInfo
	wait.For(t, 10*time.Second, "every node's spend to be settled", func() bool {
		b = budgetsOf(t, m.urls[1])[0]
		return math.Abs(b.SettledUSD-charged) < float64(ok.Load()+1)*1e-9
	})
	if b.SettledUSD+b.ReservedUSD > b.LimitUSD+1e-9 || b.OverspendUSD != 0 {
		t.Fatalf("books %+v", b)
	}
	t.Logf("%d requests served, %d refused with 402; charged $%.6f, settled $%.6f, reserved $%.6f of $1 (stranded in escrow)",
		ok.Load(), refused.Load(), charged, b.SettledUSD, b.ReservedUSD)
}

// Killing the leader under load: requests through the other nodes keep
// succeeding (none waits on Raft: they spend escrow the nodes hold), and
// a new leader is elected within about twice the election timeout.
func TestLeaderKillUnderLoad(t *testing.T) {
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", in: 1, out: 1}}, voters(t, 3, func(i int, c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: 100, Period: "month"}
	}), nil) // Raft's LAN timings: a 1 s election timeout
	leaderOf := func(url string) string {
		var doc struct{ Peers []consensus.Peer }
		if getJSON(t, url+"/v1/mesh/raft/peers", "", &doc) != 200 {
			return ""
		}
		for _, p := range doc.Peers {
			if p.Leader {
				return p.ID
			}
		}
		return ""
	}
	var old string
	wait.For(t, 10*time.Second, "a leader", func() bool { old = leaderOf(m.urls[0]); return old != "" })
	victim := slices.IndexFunc(m.nodes, func(n *node.Node) bool { return n.Name() == old })
	var survivors []string
	for i, u := range m.urls {
		if i != victim {
			survivors = append(survivors, u)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	var failed, served atomic.Int64
	var killing atomic.Bool // count from the kill on
	var codes sync.Map
	var firstErr atomic.Pointer[[]byte]
	var wg sync.WaitGroup
	for _, u := range survivors {
		for range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequest(http.MethodPost, u+"/v1/chat/completions", strings.NewReader(hello))
					req.Header.Set("Authorization", "Bearer "+testKey)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if !killing.Load() {
						continue
					}
					if resp.StatusCode == 200 {
						served.Add(1)
					} else {
						failed.Add(1)
						n, _ := codes.LoadOrStore(resp.StatusCode, new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
						firstErr.CompareAndSwap(nil, &body)
					}
				}
			})
		}
	}
	// Steady load first, so that each node's escrow is sized to its rate
	// of spending (it covers 15 s of it); nothing is awaited here.
	time.Sleep(3 * time.Second)
	killing.Store(true)
	m.nodes[victim].Kill()
	var next string
	took := wait.For(t, 10*time.Second, "a new leader", func() bool {
		next = leaderOf(survivors[0])
		return next != "" && next != old
	})
	time.Sleep(500 * time.Millisecond) // load after the election; nothing is awaited
	stop()
	wg.Wait()
	t.Logf("leader %s killed; %s elected %v later; %d requests served meanwhile, %d failed", old, next, took, served.Load(), failed.Load())
	if failed.Load() != 0 {
		codes.Range(func(k, v any) bool { t.Logf("status %v: %d", k, v.(*atomic.Int64).Load()); return true })
		t.Logf("first: %s", *firstErr.Load())
		t.Fatalf("%d requests failed while the leader was replaced", failed.Load())
	}
	// Election: a follower waits its heartbeat timeout (1 s) plus up to
	// the election timeout (1 s) before standing; split votes cost more.
	if took > 4*time.Second {
		t.Fatalf("a new leader took %v (election timeout 1 s)", took)
	}
}

// A voter restarted from its data directory recovers the ledger from
// raft.db and its snapshot and rejoins the cluster.
func TestVoterRestartRecovers(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var cfgs []*node.Config
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", in: 1, out: 1}}, voters(t, 3, func(i int, c *node.Config) {
		c.Node.DataDir = dirs[i]
		c.Tenants[0].Budget = &node.BudgetSection{USD: 7, Period: "total"}
		cfgs = append(cfgs, c)
	}), fastRaft)
	for range 5 {
		if resp := postTo(t, m.urls[2], hello); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	var before views.BudgetInfo
	wait.For(t, 10*time.Second, "spend settled", func() bool {
		before = budgetsOf(t, m.urls[0])[0]
		return before.SettledUSD > 0
	})
	// Restart node-1 on the same addresses, as a real restart would.
	victim := m.nodes[1]
	cfg := cfgs[1]
	var members struct{ Members []views.MemberInfo }
	getJSON(t, m.urls[1]+"/v1/mesh/members", "", &members)
	for _, mem := range members.Members {
		if mem.Self {
			cfg.Node.Gossip, cfg.Node.RPC, cfg.Node.HTTP = mem.Address, mem.RPC, mem.HTTP
		}
	}
	var peers struct{ Peers []consensus.Peer }
	getJSON(t, m.urls[1]+"/v1/mesh/raft/peers", "", &peers)
	for _, p := range peers.Peers {
		if p.ID == "node-1" {
			cfg.Node.Raft = p.Address
		}
	}
	if err := victim.Snapshot(); err != nil {
		t.Fatal(err)
	}
	victim.Kill()
	cfg.Node.Join = []string{m.nodes[0].Mesh().Addr()}
	again := harness.JoinNode(t, cfg, node.Options{Logger: quietLogger(), LedgerTuning: func(c *consensus.ServerConfig) { c.Timings = consensus.FastTimings }})
	url := "http://" + again.HTTPAddr()
	// At once, before it could have caught up from the leader, its
	// replica holds the ledger of its snapshot.
	var restored struct{ Budgets []views.BudgetInfo }
	getJSON(t, url+"/v1/mesh/budgets?consistency=stale", "", &restored)
	if len(restored.Budgets) != 1 || restored.Budgets[0].LimitUSD != 7 {
		t.Fatalf("right after the restart the replica holds %+v", restored.Budgets)
	}
	wait.For(t, 20*time.Second, "the restarted voter to be ready", again.Ready)
	var stale struct {
		Consistency string
		Budgets     []views.BudgetInfo
	}
	wait.For(t, 10*time.Second, "its replica to hold the ledger again", func() bool {
		getJSON(t, url+"/v1/mesh/budgets?consistency=stale", "", &stale)
		return len(stale.Budgets) == 1 && stale.Budgets[0].SettledUSD >= before.SettledUSD
	})
	if stale.Consistency != "stale" || stale.Budgets[0].LimitUSD != 7 {
		t.Fatalf("restarted replica: %+v", stale)
	}
	getJSON(t, url+"/v1/mesh/raft/peers", "", &peers)
	voterCount := 0
	for _, p := range peers.Peers {
		if p.Voter {
			voterCount++
		}
	}
	if voterCount != 3 {
		t.Fatalf("peers after the restart: %+v", peers.Peers)
	}
	if resp := postTo(t, url, hello); resp.StatusCode != 200 {
		t.Fatalf("the restarted node answers %d", resp.StatusCode)
	}
}

// Budgets change live through the admin API; an unknown tenant is a 404;
// a node's escrow can be written off.
func TestBudgetAdminAPI(t *testing.T) {
	m := startMeshWith(t, 1, []upstream{{name: "p", kind: "openai", in: 1, out: 1}}, voters(t, 1, func(i int, c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: 1, Period: "month"}
	}), fastRaft)
	put := func(tenant, body string) int {
		req, _ := http.NewRequest(http.MethodPut, m.urls[0]+"/v1/mesh/budgets/"+tenant, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := put("t1", `{"usd": 3, "period": "day"}`); code != 200 {
		t.Fatalf("set: %d", code)
	}
	wait.For(t, 5*time.Second, "the new limit", func() bool {
		bs := budgetsOf(t, m.urls[0])
		for _, b := range bs {
			if b.LimitUSD == 3 && len(b.Period) == len("2006-01-02") {
				return true
			}
		}
		return false
	})
	if code := put("nobody", `{"usd": 3}`); code != 404 {
		t.Fatalf("unknown tenant: %d", code)
	}
	if code := put("t1", `{"usd": -1}`); code != 400 {
		t.Fatalf("negative: %d", code)
	}
	resp, err := http.Post(m.urls[0]+"/v1/mesh/budgets/forfeit", "application/json", strings.NewReader(`{"node":"ghost"}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("forfeit: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp := postTo(t, m.urls[0], hello); resp.StatusCode != 200 {
		t.Fatalf("serving after the change: %d", resp.StatusCode)
	}
}
